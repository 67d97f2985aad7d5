//go:build unix

package supervisor

import (
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

func TestMain(m *testing.M) {
	if IsReaper(os.Getenv) {
		os.Exit(RunReaper(os.Stdin))
	}
	os.Exit(m.Run())
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	if !enginetest.Poll(d, func() bool { return !alive(pid) }) {
		t.Fatalf("pid %d still alive after %v", pid, d)
	}
}

func waitFileText(t *testing.T, path string, d time.Duration) string {
	t.Helper()
	var text string
	written := func() bool {
		b, err := os.ReadFile(path)
		text = strings.TrimSpace(string(b))
		return err == nil && len(b) > 0 && b[len(b)-1] == '\n'
	}
	if !enginetest.Poll(d, written) {
		t.Fatalf("%s never written", path)
	}
	return text
}

func TestPoliteStopAndLog(t *testing.T) {
	dir := t.TempDir()
	s := New(nil)
	log := filepath.Join(dir, "w.log")
	p, err := s.Start(Spec{Name: "w", Argv: []string{"/bin/sh", "-c", `trap 'echo bye; exit 0' TERM; echo hello $FOO; while :; do sleep 0.05; done`},
		Env: []string{"FOO=bar", "PATH=/usr/bin:/bin"}, LogPath: log})
	if err != nil {
		t.Fatal(err)
	}
	waitFileText(t, log, 5*time.Second)
	killed, err := s.Stop("w", 5*time.Second)
	if err != nil || killed {
		t.Fatalf("Stop = %v, %v; want a polite stop", killed, err)
	}
	<-p.Done()
	if !p.Expected() {
		t.Fatal("stop not marked expected")
	}
	b, _ := os.ReadFile(log)
	if !strings.Contains(string(b), "hello bar") || !strings.Contains(string(b), "bye") {
		t.Fatalf("log = %q", b)
	}
}

func TestKillAfterStopTimeout(t *testing.T) {
	s := New(nil)
	log := filepath.Join(t.TempDir(), "stubborn.log")
	p, err := s.Start(Spec{Name: "stubborn", Argv: []string{"/bin/sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`}, LogPath: log})
	if err != nil {
		t.Fatal(err)
	}
	waitFileText(t, log, 5*time.Second)
	start := time.Now()
	killed, err := s.Stop("stubborn", 300*time.Millisecond)
	if err != nil || !killed {
		t.Fatalf("Stop = %v, %v; want killed", killed, err)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
		t.Fatalf("stop took %v", el)
	}
	waitGone(t, p.PID, 2*time.Second)
}

func TestUnexpectedExitIsReported(t *testing.T) {
	s := New(nil)
	got := make(chan *Process, 1)
	s.OnExit = func(p *Process) { got <- p }
	p, err := s.Start(Spec{Name: "w", Argv: []string{"/bin/sh", "-c", "while :; do sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.Name != "w" || e.ExitErr() == nil || !strings.Contains(e.ExitErr().Error(), "killed") {
			t.Fatalf("OnExit got %s: %v", e.Name, e.ExitErr())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no OnExit after kill -9")
	}
}

// TestReaperKillsGroupsWhenOwnerDies runs a middle process (this test binary as a reaper owner
// stand-in: a shell that holds the reaper's stdin) and kills it with SIGKILL: the reaper must
// kill the registered group, grandchildren included.
func TestReaperKillsGroupsWhenOwnerDies(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "grandchild.pid")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartReaper(os.Environ(), exe)
	if err != nil {
		t.Fatal(err)
	}
	// A worker in its own group that starts a grandchild in the same group.
	w := exec.Command("/bin/sh", "-c", `sleep 60 & echo $! > `+pidfile+`; wait`)
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	go w.Wait()
	if err := r.Add(w.Process.Pid); err != nil {
		t.Fatal(err)
	}
	gc, _ := strconv.Atoi(waitFileText(t, pidfile, 5*time.Second))
	// Closing the pipe is what the kernel does when Compose dies.
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, w.Process.Pid, 2*time.Second)
	waitGone(t, gc, 2*time.Second)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("reaping took %v", el)
	}
}

func TestRotatingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.log")
	l, err := OpenLog(path, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"aaaaaaaa\n", "bbbbbbbb\n", "cccccccc\n", "dddddddd\n"} {
		if _, err := l.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{path: "dddddddd\n", path + ".1": "cccccccc\n", path + ".2": "bbbbbbbb\n"} {
		b, err := os.ReadFile(file)
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", file, b, err, want)
		}
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("a third archive exists: %v", err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v", st.Mode().Perm())
	}
}

func TestLogHasEverythingWhenDone(t *testing.T) {
	log := filepath.Join(t.TempDir(), "w.log")
	s := New(nil)
	p, err := s.Start(Spec{Name: "w", Argv: []string{"/bin/sh", "-c", "i=0; while [ $i -lt 200 ]; do echo line $i; i=$((i+1)); done; exit 3"}, LogPath: log})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	b, _ := os.ReadFile(log)
	if !strings.HasSuffix(string(b), "line 199\n") {
		t.Fatalf("log ends %q", b[max(0, len(b)-20):])
	}
}
