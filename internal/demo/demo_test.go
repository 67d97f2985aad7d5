package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestCopyProjectLeavesStateBehind(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "p")
	must(t, os.MkdirAll(filepath.Join(src, "worker"), 0o755))
	must(t, os.MkdirAll(filepath.Join(src, ".iii", "compose"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "worker-compose.yaml"), []byte("a"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "worker-compose.lock"), []byte("b"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "worker", "run.sh"), []byte("c"), 0o755))
	must(t, copyProject(src, dst))
	if st, err := os.Stat(filepath.Join(dst, "worker", "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("worker/run.sh: %v %v", st, err)
	}
	for _, gone := range []string{".iii", "worker-compose.lock"} {
		if _, err := os.Stat(filepath.Join(dst, gone)); err == nil {
			t.Errorf("%s was copied", gone)
		}
	}
}

func TestPrefixWriterWritesWholeLines(t *testing.T) {
	var out bytes.Buffer
	p := &prefixWriter{w: &out, prefix: "> "}
	p.Write([]byte("one\ntw"))
	p.Write([]byte("o\nthree"))
	p.Flush()
	if got, want := out.String(), "> one\n> two\n> three\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestDemoProcessesFindsChildrenByHome(t *testing.T) {
	tmp := t.TempDir()
	r := &run{tmp: tmp, home: filepath.Join(tmp, "home")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sleep", "30")
	cmd.Env = []string{"HOME=" + r.home, "PATH=" + os.Getenv("PATH")}
	must(t, cmd.Start())
	pids := func() []int {
		var out []int
		for _, p := range r.demoProcesses() {
			out = append(out, p.pid)
		}
		return out
	}
	if got := pids(); !slices.Contains(got, cmd.Process.Pid) {
		t.Fatalf("demo processes %v miss the child %d", got, cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got := pids(); slices.Contains(got, cmd.Process.Pid) {
		t.Fatalf("demo processes %v still list the reaped child", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
