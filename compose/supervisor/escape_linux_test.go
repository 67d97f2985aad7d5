//go:build linux

package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
)

func ppid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestStopEndsDescendantsThatLeftTheGroup: a worker starts two processes in new sessions, one
// still below it and one whose parent exited at once (adopted by Compose, the subreaper); Stop
// ends both, and so does the worker's own exit.
func TestStopEndsDescendantsThatLeftTheGroup(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartReaper(os.Environ(), exe)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := New(r)
	for _, stop := range []bool{true, false} {
		dir := t.TempDir()
		adopted, chained := filepath.Join(dir, "adopted.pid"), filepath.Join(dir, "chained.pid")
		script := fmt.Sprintf(`(setsid sleep 300 & echo $! > %s); setsid sleep 301 & echo $! > %s; sleep 302`, adopted, chained)
		p, err := s.Start(Spec{Name: "w", Argv: []string{"/bin/sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := strconv.Atoi(waitFileText(t, adopted, 5*time.Second))
		c, _ := strconv.Atoi(waitFileText(t, chained, 5*time.Second))
		if !enginetest.Poll(5*time.Second, func() bool { return ppid(t, a) == os.Getpid() }) {
			t.Fatalf("the orphan %d was re-parented to %d, not to this subreaper %d", a, ppid(t, a), os.Getpid())
		}
		if !alive(a) || !alive(c) {
			t.Fatal("the escaped processes are not running")
		}
		if stop {
			if _, err := s.Stop("w", 2*time.Second); err != nil {
				t.Fatal(err)
			}
		} else {
			// The worker dies on its own (kill -9 of the worker).
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			<-p.Done()
		}
		waitGone(t, a, 3*time.Second)
		waitGone(t, c, 3*time.Second)
		s.Forget("w")
	}
}

// TestKillMarked: the reaper's last step ends the processes whose marker names the Compose that
// died, and no other.
func TestKillMarked(t *testing.T) {
	start := func(mark string) *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		cmd.Env = append(os.Environ(), EnvProcess+"="+mark)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		return cmd
	}
	self := os.Getpid()
	mine := start(marker(self, "w"))
	other := start(marker(self+1, "w"))
	defer other.Process.Kill()
	killMarked(self)
	waitGone(t, mine.Process.Pid, 3*time.Second)
	if !alive(other.Process.Pid) {
		t.Fatal("killMarked ended a process of another Compose")
	}
}
