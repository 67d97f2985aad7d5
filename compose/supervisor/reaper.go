package supervisor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/iii-go/iii/internal/base/procgroup"
)

// EnvReaper marks a process started as the reaper; `iii compose` hands over to RunReaper when it
// is set.
const EnvReaper = "III_COMPOSE_REAPER"

// IsReaper reports whether this process, whose environment is getenv, was started as a reaper.
func IsReaper(getenv func(string) string) bool { return getenv(EnvReaper) == "1" }

// RunReaper is the reaper's main loop. It reads "+PGID" and "-PGID" lines on stdin; when stdin
// ends (Compose exited, SIGKILL included) it sends SIGKILL to every process group still listed
// and exits. It ignores SIGINT and SIGTERM so that a Ctrl-C meant for Compose leaves it to
// Compose's orderly stop. It returns the process exit code.
func RunReaper(in io.Reader) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	compose := os.Getppid()
	groups := map[int]bool{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	for pgid := range groups {
		_ = procgroup.Signal(pgid, syscall.SIGKILL)
	}
	// Processes that left their group were re-parented away from Compose when it died; their
	// EnvProcess marker still names it.
	killMarked(compose)
	return 0
}

// Reaper is the handle Compose keeps on its reaper process: a child that outlives Compose just
// long enough to kill the process groups Compose was supervising.
type Reaper struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	w   io.WriteCloser
}

// StartReaper starts exe args... as the reaper, in its own process group, with the environment
// env (KEY=VALUE, Compose's own; nil is an empty one) and EnvReaper=1.
func StartReaper(env []string, exe string, args ...string) (*Reaper, error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(env[:len(env):len(env)], EnvReaper+"=1")
	cmd.SysProcAttr = procgroup.Attr(false)
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := startRecorded(cmd.Start, func() int { return cmd.Process.Pid }); err != nil {
		return nil, fmt.Errorf("starting the reaper: %w", err)
	}
	return &Reaper{cmd: cmd, w: w}, nil
}

// PID is the reaper's process id.
func (r *Reaper) PID() int { return r.cmd.Process.Pid }

// Add asks the reaper to kill process group pgid if Compose dies.
func (r *Reaper) Add(pgid int) error { return r.send('+', pgid) }

// Remove tells the reaper that process group pgid is gone.
func (r *Reaper) Remove(pgid int) error { return r.send('-', pgid) }

func (r *Reaper) send(op byte, pgid int) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := fmt.Fprintf(r.w, "%c%d\n", op, pgid)
	return err
}

// Close ends the reaper: first every process still below Compose (but the reaper) is killed,
// orphans Compose adopted included; then the reaper kills the groups still listed and exits;
// Close waits for it.
func (r *Reaper) Close() error {
	if r == nil {
		return nil
	}
	killDescendants(r.PID())
	r.mu.Lock()
	err := r.w.Close()
	r.mu.Unlock()
	if werr := r.cmd.Wait(); err == nil {
		err = werr
	}
	return err
}
