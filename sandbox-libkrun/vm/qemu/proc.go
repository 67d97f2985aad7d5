package qemu

import (
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/procgroup"
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
	err  error
}

// startProc starts argv with its output to log. small asks for a process whose memory is
// never backed by huge pages (startWithoutHugePages); a non-nil fd3 is the child's fd 3.
func startProc(name string, argv []string, log *os.File, small bool, fd3 *os.File) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = log
	cmd.Stderr = log
	if fd3 != nil {
		cmd.ExtraFiles = []*os.File{fd3}
	}
	cmd.SysProcAttr = procgroup.Attr(true)
	start := startCmd
	if small {
		start = startWithoutHugePages
	}
	if err := start(cmd); err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
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
