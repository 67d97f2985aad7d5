// Package supervisor starts, watches and stops the processes of a Compose project: each worker
// and the managed engine run in their own process group with their output in a log file, die
// with Compose (SIGKILL on parent death, and a reaper process that kills their groups when
// Compose is gone), and stop politely (SIGTERM) before a SIGKILL after their stop timeout.
//
// A descendant that leaves its group (setsid) does not escape (Linux): Compose is a child
// subreaper, so such a process stays below Compose when its parent dies; every child carries an
// EnvProcess marker; stopping a child, or its exit, also ends the descendants that left its
// group; the reaper ends the marked processes once Compose is gone; and the reaper's Close ends
// whatever is still below Compose.
//
// Readiness and start order belong to the caller; the supervisor only owns processes.
package supervisor

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/internal/base/procgroup"
)

// Spec describes one process.
type Spec struct {
	Name    string   // container key, or "engine"
	Argv    []string // program and arguments; Argv[0] is looked up in PATH
	Dir     string   // working directory
	Env     []string // complete environment, KEY=VALUE; nil is an empty one
	LogPath string   // stdout and stderr are appended here
}

// Process is one running (or finished) child.
type Process struct {
	Name    string
	PID     int
	Started time.Time

	cmd     *exec.Cmd
	done    chan struct{}
	copied  chan struct{} // closed when the output is all in the log
	err     error
	stopped bool  // Stop was asked for: the exit is expected
	escaped []int // descendants outside the group that Stop found, ended with the process
	mu      sync.Mutex
}

// Done is closed when the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitErr is the reason the process ended (nil for exit status 0); valid after Done.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Expected reports whether the process ended because Stop asked it to.
func (p *Process) Expected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// Supervisor owns a set of child processes.
type Supervisor struct {
	reaper *Reaper
	// OnExit, when set, is called from a goroutine after a process ended without Stop.
	OnExit func(p *Process)
	// LogMaxBytes is the size at which a process's log rotates (0: LogMaxBytes).
	LogMaxBytes int64

	mu    sync.Mutex
	procs map[string]*Process
}

// New returns a supervisor that registers its process groups with reaper (which may be nil).
// With a reaper (Compose itself, not a test), the process becomes a child subreaper on Linux.
func New(reaper *Reaper) *Supervisor {
	if reaper != nil {
		_ = adopt()
	}
	return &Supervisor{reaper: reaper, procs: map[string]*Process{}}
}

// ErrRunning is returned by Start when a process of that name is still running.
var ErrRunning = errors.New("already running")

// Start spawns spec.
func (s *Supervisor) Start(spec Spec) (*Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no command")
	}
	s.mu.Lock()
	if old := s.procs[spec.Name]; old != nil {
		select {
		case <-old.done:
		default:
			s.mu.Unlock()
			return nil, fmt.Errorf("%s: %w", spec.Name, ErrRunning)
		}
	}
	s.mu.Unlock()
	cmd := command(spec)
	var capture *logCapture
	if spec.LogPath != "" {
		var err error
		if capture, err = openCapture(spec.LogPath, cmp.Or(s.LogMaxBytes, LogMaxBytes)); err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = capture.pipes[0][1], capture.pipes[1][1]
	}
	if err := Spawn(cmd); err != nil {
		if capture != nil {
			capture.close()
		}
		return nil, err
	}
	copied := make(chan struct{})
	if capture != nil {
		capture.start(copied)
	} else {
		close(copied)
	}
	p := &Process{Name: spec.Name, PID: cmd.Process.Pid, Started: time.Now(), cmd: cmd, done: make(chan struct{}), copied: copied}
	if err := s.reaper.Add(p.PID); err != nil {
		_ = procgroup.Signal(p.PID, syscall.SIGKILL)
	}
	s.mu.Lock()
	s.procs[spec.Name] = p
	s.mu.Unlock()
	go s.wait(p)
	return p, nil
}

// command is the command of spec, in its own process group, with the marker that names it.
func command(spec Spec) *exec.Cmd {
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Dir
	env := spec.Env
	cmd.Env = append(env[:len(env):len(env)], EnvProcess+"="+marker(os.Getpid(), spec.Name))
	cmd.SysProcAttr = procgroup.Attr(true)
	return cmd
}

// logCapture is the log of one process and the pipes that feed it.
type logCapture struct {
	log   *RotatingLog
	pipes [2][2]*os.File // stdout, stderr: read and write ends
}

// openCapture opens the log at path and the stdout and stderr pipes that feed it.
func openCapture(path string, maxBytes int64) (*logCapture, error) {
	log, err := OpenLog(path, maxBytes, LogArchives)
	if err != nil {
		return nil, err
	}
	c := &logCapture{log: log}
	for i := range c.pipes {
		if c.pipes[i][0], c.pipes[i][1], err = os.Pipe(); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// close closes the log and every pipe, for a capture whose process did not start.
func (c *logCapture) close() {
	c.closePipes()
	c.log.Close()
}

// closePipes closes every pipe end still open.
func (c *logCapture) closePipes() {
	for _, pp := range c.pipes {
		for _, f := range pp {
			if f != nil {
				f.Close()
			}
		}
	}
}

// start copies both streams into the log once the process holds the write ends, and closes
// copied when both copies and the log are done.
func (c *logCapture) start(copied chan struct{}) {
	// Each copy ends when every process of the group has closed its end; each line goes
	// into the log whole, tagged with its stream.
	var wg sync.WaitGroup
	for i, stream := range []string{StreamStdout, StreamStderr} {
		r := c.pipes[i][0]
		c.pipes[i][1].Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			lw := NewLineWriter(stream, c.log)
			_, _ = io.Copy(lw, r)
			_ = lw.Close()
			r.Close()
		}()
	}
	go func() {
		wg.Wait()
		c.log.Close()
		close(copied)
	}()
}

func (s *Supervisor) wait(p *Process) {
	err := p.cmd.Wait()
	// The group may hold descendants that outlive the leader; they go with it, and so do those
	// that left the group.
	_ = procgroup.Signal(p.PID, syscall.SIGKILL)
	p.mu.Lock()
	esc := p.escaped
	p.mu.Unlock()
	signalPIDs(append(esc, escapees(p.Name, p.PID)...), syscall.SIGKILL)
	// Let the log catch up, unless something outside the group still holds its pipe.
	select {
	case <-p.copied:
	case <-time.After(2 * time.Second):
	}
	_ = s.reaper.Remove(p.PID)
	p.mu.Lock()
	p.err = err
	expected := p.stopped
	p.mu.Unlock()
	close(p.done)
	if !expected && s.OnExit != nil {
		s.OnExit(p)
	}
}

// Get returns the process named name, if any was started.
func (s *Supervisor) Get(name string) *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

// Running reports whether the named process is alive.
func (s *Supervisor) Running(name string) bool {
	p := s.Get(name)
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM to the process group of name, waits up to timeout, then sends SIGKILL and
// waits for the exit. It reports whether the kill was needed. A process that is not running is
// not an error.
func (s *Supervisor) Stop(name string, timeout time.Duration) (killed bool, err error) {
	p := s.Get(name)
	if p == nil {
		return false, nil
	}
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	select {
	case <-p.done:
		return false, nil
	default:
	}
	// Found before the signal, while they still hang below the leader; killed when it exits.
	esc := escapees(name, p.PID)
	p.mu.Lock()
	p.escaped = esc
	p.mu.Unlock()
	_ = procgroup.Signal(p.PID, syscall.SIGTERM)
	signalPIDs(esc, syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return false, nil
	case <-t.C:
	}
	_ = procgroup.Signal(p.PID, syscall.SIGKILL)
	kt := time.NewTimer(5 * time.Second)
	defer kt.Stop()
	select {
	case <-p.done:
		return true, nil
	case <-kt.C:
		return true, fmt.Errorf("%s (pid %d) survived SIGKILL for 5s", name, p.PID)
	}
}

// Forget drops a finished process from the table.
func (s *Supervisor) Forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[name]; p != nil {
		select {
		case <-p.done:
			delete(s.procs, name)
		default:
		}
	}
}
