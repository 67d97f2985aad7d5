package qemu

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/procgroup"
)

// Pdeathsig fires when the parent *thread* exits, not the process. Every child is therefore
// started from one goroutine locked to an OS thread that lives as long as the process, so the
// signal comes exactly when the adapter dies.
var (
	spawnOnce sync.Once
	spawnReq  chan func()
)

func onSpawnThread(f func()) {
	spawnOnce.Do(func() {
		spawnReq = make(chan func())
		go func() {
			runtime.LockOSThread()
			for g := range spawnReq {
				g()
			}
		}()
	})
	done := make(chan struct{})
	spawnReq <- func() { f(); close(done) }
	<-done
}

// startCmd starts cmd on the spawn thread.
func startCmd(cmd *exec.Cmd) error {
	var err error
	onSpawnThread(func() { err = cmd.Start() })
	return err
}

// proc is a child process owned by a machine: killed with SIGKILL by PID when the machine ends,
// and by the kernel (Pdeathsig) when the adapter process dies.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startProc(name string, argv []string, log *os.File) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = procgroup.Attr(true)
	if err := startCmd(cmd); err != nil {
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
