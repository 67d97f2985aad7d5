package qemu

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/iii-go/iii/internal/base/procgroup"
)

// startCmd starts cmd on the process-lifetime spawn thread, so its parent-death signal comes
// exactly when the adapter dies (procgroup.Start).
func startCmd(cmd *exec.Cmd) error { return procgroup.Start(cmd) }

// proc is a child process owned by a machine: killed with SIGKILL by PID when the machine ends,
// and by the kernel (Pdeathsig) when the adapter process dies.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // how it ended once done is closed, never nil: see startProc
}

// startProc starts argv with its output to log. small asks for a process whose memory is
// never backed by huge pages (startWithoutHugePages); a non-nil fd3 is the child's fd 3.
func startProc(name string, argv []string, log *os.File, small bool, fd3 *os.File) (*proc, error) {
	start := startCmd
	if small {
		start = startWithoutHugePages
	}
	return startProcWith(name, argv, log, fd3, func(cmd *exec.Cmd, _ <-chan struct{}) error { return start(cmd) })
}

// startNetProc starts argv as startProc does, with its network destinations held to pol
// (startGuarded): a networked machine's qemu.
func startNetProc(name string, argv []string, log *os.File, pol *netPolicy) (*proc, error) {
	return startProcWith(name, argv, log, nil, func(cmd *exec.Cmd, exited <-chan struct{}) error {
		return startGuarded(cmd, pol, exited)
	})
}

// startProcWith starts argv with start, which is handed the channel closed once the process has
// been reaped.
func startProcWith(name string, argv []string, log *os.File, fd3 *os.File, start func(*exec.Cmd, <-chan struct{}) error) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = log
	cmd.Stderr = log
	if fd3 != nil {
		cmd.ExtraFiles = []*os.File{fd3}
	}
	cmd.SysProcAttr = procgroup.Attr(true)
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	if err := start(cmd, p.done); err != nil {
		return nil, err
	}
	go func() {
		// A clean exit is recorded as "exit status 0", as exec spells the others, so the
		// errors that report an early exit always have a cause to wrap.
		if p.err = cmd.Wait(); p.err == nil {
			p.err = errors.New("exit status 0")
		}
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process (and its group) and waits for it to be reaped.
func (p *proc) kill() {
	if !p.exited() {
		_ = procgroup.Signal(p.pid(), syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// waitFor waits at most d for the process to exit by itself.
func (p *proc) waitFor(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}
