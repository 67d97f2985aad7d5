//go:build linux

package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

func TestAgentRevision(t *testing.T) {
	for s, want := range map[string]int{"iii-guest/9": 9, "iii-guest/8": 8, "iii-guest/10": 10, "": 0, "other/9": 0, "iii-guest/x": 0} {
		if got := agentRevision(s); got != want {
			t.Errorf("agentRevision(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestProcessesUnsupported: a machine whose agent predates revision 9 (a restored machine whose
// Resume reply named no version) answers every process call with ErrProcessesUnsupported.
func TestProcessesUnsupported(t *testing.T) {
	ctx := context.Background()
	for _, agent := range []string{"", "iii-guest/8"} {
		m := &machine{agent: agent}
		_, _, err1 := m.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"true"}}, nil)
		_, err2 := m.AttachProcess(ctx, "p1", vm.AttachOptions{})
		_, err3 := m.ListProcesses(ctx)
		err4 := m.SignalProcess(ctx, "p1", syscall.SIGTERM)
		_, err5 := m.WaitProcess(ctx, "p1")
		err6 := m.ResizeProcess(ctx, "p1", vm.TermSize{Rows: 1, Cols: 1})
		for i, err := range []error{err1, err2, err3, err4, err5, err6} {
			if !errors.Is(err, vm.ErrProcessesUnsupported) {
				t.Errorf("agent %q, call %d: %v, want ErrProcessesUnsupported", agent, i+1, err)
			}
		}
	}
}

// procRoot is the busybox root with the applets the process tests use.
func procRoot(t *testing.T) string {
	root := busyboxRoot(t)
	for _, app := range []string{"seq", "tty", "stty", "tr", "wc"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", app)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// readAll reads an attachment's stdout and stderr to their ends, then its exit.
func readAll(t *testing.T, a vm.Attachment) (stdout, stderr []byte, ex vm.ProcessExit) {
	t.Helper()
	errc := make(chan error, 1)
	var eb bytes.Buffer
	go func() { _, err := io.Copy(&eb, a.Stderr()); errc <- err }()
	ob, err := io.ReadAll(a.Stdout())
	if err != nil {
		t.Fatalf("stdout: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("stderr: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err = a.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return ob, eb.Bytes(), ex
}

func exitCode(ex vm.ProcessExit) int {
	if ex.ExitCode == nil {
		return -1
	}
	return *ex.ExitCode
}

// guestFile is the content of path in the guest ("" when absent).
func guestFile(t *testing.T, m vm.Machine, path string) string {
	t.Helper()
	res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "cat " + path + " 2>/dev/null"}})
	return strings.TrimSpace(string(res.Stdout))
}

// seqOut is the output of `seq from to`.
func seqOut(from, to int) []byte {
	var b bytes.Buffer
	for i := from; i <= to; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// readUntil reads r until what it read contains want.
func readUntil(t *testing.T, r io.Reader, got *bytes.Buffer, want string) {
	t.Helper()
	buf := make([]byte, 4096)
	for !strings.Contains(got.String(), want) {
		n, err := r.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("reading for %q: %v; read %q", want, err, got.String())
		}
	}
}

// TestProcesses runs the long-lived processes of one machine: streamed output under
// back-pressure, detach and re-attach through the ring, signals, a terminal, and many at once.
func TestProcesses(t *testing.T) {
	d := newDriver(t)
	m := boot(t, d, vm.Spec{RootFS: procRoot(t), MemoryMB: 512})
	pm, ok := m.(vm.Processes)
	if !ok {
		t.Fatal("the qemu machine is not vm.Processes")
	}
	ctx := context.Background()

	t.Run("first byte", func(t *testing.T) {
		// The first run of each path translates its code under TCG: the later runs show the
		// warm cost of each.
		for i := range 5 {
			start := time.Now()
			_, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", "echo x"}}, &vm.AttachOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 2)
			if _, err := io.ReadFull(a.Stdout(), b); err != nil || string(b) != "x\n" {
				t.Fatalf("first bytes %q, %v", b, err)
			}
			first := time.Since(start)
			readAll(t, a)
			execStart := time.Now()
			run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "echo x"}})
			t.Logf("run %d of sh -c 'echo x': first byte of the streamed process %s after its start; the same buffered exec %s", i+1, first.Round(time.Microsecond), time.Since(execStart).Round(time.Microsecond))
		}
	})

	t.Run("5 MiB streamed whole, the exit last", func(t *testing.T) {
		const size = 5 << 20
		start := time.Now()
		_, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", fmt.Sprintf("yes 0123456789abcdef | head -c %d; echo done >&2", size)}}, &vm.AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, ex := readAll(t, a)
		el := time.Since(start)
		want := bytes.Repeat([]byte("0123456789abcdef\n"), size/17+1)[:size]
		if !bytes.Equal(out, want) || string(errOut) != "done\n" || exitCode(ex) != 0 {
			t.Fatalf("stdout %d bytes (equal %v), stderr %q, exit %+v", len(out), bytes.Equal(out, want), errOut, ex)
		}
		local := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("yes 0123456789abcdef | head -c %d >/dev/null", size)}})
		t.Logf("5 MiB of yes | head -c through the process stream in %s: %.1f MB/s (the same command writing to /dev/null in the guest: %s)",
			el.Round(time.Millisecond), float64(size)/el.Seconds()/1e6, local.Duration.Round(time.Millisecond))

		// busybox head writes in small pieces, slow under TCG: dd's large writes show what the
		// stream itself carries (timed from its first byte), next to the streamed fs::read of
		// a file as large.
		const big = 20 << 20
		_, a, err = pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"dd", "if=/dev/zero", "bs=262144", fmt.Sprint("count=", big/262144)}}, &vm.AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(a.Stdout(), b); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		n, err := io.Copy(io.Discard, a.Stdout())
		if err != nil || n != big-1 {
			t.Fatalf("dd: %d bytes, %v", n+1, err)
		}
		procRate := float64(big) / time.Since(start).Seconds() / 1e6
		readAll(t, a)
		run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero > /tmp/big", big)}})
		start = time.Now()
		_, body, err := m.(vm.FSStreamer).FSRead(ctx, json.RawMessage(`{"path":"/tmp/big"}`))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, body); err != nil || n != big {
			t.Fatalf("fs read: %d bytes, %v", n, err)
		}
		t.Logf("20 MiB of dd bs=256k through the process stream: %.1f MB/s; the streamed fs::read of as large a file: %.1f MB/s",
			procRate, float64(big)/time.Since(start).Seconds()/1e6)
		run(t, m, vm.ExecRequest{Argv: []string{"rm", "/tmp/big"}})
	})

	t.Run("a slow reader blocks the process", func(t *testing.T) {
		const chunks = 32
		script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do head -c 1048576 /dev/zero; i=$((i+1)); echo $i > /tmp/mark; done`, chunks)
		_, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", script}}, &vm.AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Unread, the output stops at the stream's window (4 MiB the host may leave unread)
		// plus what the pipe holds (1 MiB): the marks rise to 5 or 6 and stay there however
		// long the host waits.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if n, _ := strconv.Atoi(guestFile(t, m, "/tmp/mark")); n > 7 {
				t.Fatalf("mark %d with nothing read: the process was not blocked", n)
			}
		}
		t.Logf("with nothing read the process stopped at mark %q of %d", guestFile(t, m, "/tmp/mark"), chunks)
		n, err := io.Copy(io.Discard, a.Stdout())
		if err != nil || n != chunks<<20 {
			t.Fatalf("read %d bytes, %v; want %d", n, err, chunks<<20)
		}
		if _, _, ex := readAll(t, a); exitCode(ex) != 0 || guestFile(t, m, "/tmp/mark") != strconv.Itoa(chunks) {
			t.Fatalf("exit %+v, mark %q", ex, guestFile(t, m, "/tmp/mark"))
		}
	})

	t.Run("detach and re-attach through an overflowed ring", func(t *testing.T) {
		const ring = 64 << 10
		script := `seq 1 1000; while [ ! -e /tmp/gate ]; do sleep 0.05; done; seq 1001 100000`
		info, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", script}, RingBytes: ring}, &vm.AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first := seqOut(1, 1000)
		got := make([]byte, len(first))
		if _, err := io.ReadFull(a.Stdout(), got); err != nil || !bytes.Equal(got, first) {
			t.Fatalf("first part: %v", err)
		}
		a.Detach()
		if _, err := a.Stdout().Read(got); err == nil {
			t.Fatal("a detached attachment still reads")
		}
		run(t, m, vm.ExecRequest{Argv: []string{"touch", "/tmp/gate"}})
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if ex, err := pm.WaitProcess(wctx, info.ID); err != nil || exitCode(ex) != 0 {
			t.Fatalf("wait: %+v %v", ex, err)
		}
		b, err := pm.AttachProcess(ctx, info.ID, vm.AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rest, _, ex := readAll(t, b)
		dropped, _ := b.Dropped()
		all := seqOut(1, 100000)
		missed := all[len(first):]
		if dropped <= 0 || dropped+int64(len(rest)) != int64(len(missed)) || !bytes.HasSuffix(missed, rest) || exitCode(ex) != 0 {
			t.Fatalf("re-attached: %d bytes, dropped %d, missed %d; suffix %v; exit %+v", len(rest), dropped, len(missed), bytes.HasSuffix(missed, rest), ex)
		}
		t.Logf("re-attached after the ring (%d bytes) overflowed: %d bytes replayed, %d dropped", ring, len(rest), dropped)
	})

	t.Run("SIGTERM", func(t *testing.T) {
		info, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", "echo up; exec sleep 300"}}, &vm.AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		readUntil(t, a.Stdout(), &got, "up\n")
		// A second attachment takes over: the first one's streams end with an error, not
		// the process's end, and the second one has nothing to replay (the first took all).
		b, err := pm.AttachProcess(ctx, info.ID, vm.AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(a.Stdout()); err == nil || !strings.Contains(err.Error(), "another attachment") {
			t.Fatalf("the first attachment after a second one: %v", err)
		}
		if err := pm.SignalProcess(ctx, info.ID, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		out, _, ex := readAll(t, b)
		if len(out) != 0 {
			t.Fatalf("the second attachment replayed %q, which the first had taken", out)
		}
		if ex.ExitCode != nil || ex.Signal != int(syscall.SIGTERM) || ex.TimedOut {
			t.Fatalf("exit %+v, want signal 15", ex)
		}
		var pe *vm.ProcessError
		if err := pm.SignalProcess(ctx, info.ID, syscall.SIGTERM); !errors.As(err, &pe) || pe.Code != vm.ProcessExited {
			t.Fatalf("signal of an exited process: %v", err)
		}
		if err := pm.SignalProcess(ctx, "p999999", syscall.SIGTERM); !errors.As(err, &pe) || pe.Code != vm.ProcessNotFound {
			t.Fatalf("signal of an unknown process: %v", err)
		}
		if err := pm.ResizeProcess(ctx, info.ID, vm.TermSize{Rows: 5, Cols: 5}); !errors.As(err, &pe) || pe.Code != vm.ProcessNoTTY {
			t.Fatalf("resize of a process without a terminal: %v", err)
		}
	})

	t.Run("timeout kills the group", func(t *testing.T) {
		_, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", "sleep 300 & sleep 300"}, Timeout: 300 * time.Millisecond}, &vm.AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, ex := readAll(t, a); !ex.TimedOut || ex.Signal != int(syscall.SIGKILL) {
			t.Fatalf("exit %+v, want timed out by SIGKILL", ex)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		_, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"wc", "-c"}}, &vm.AttachOptions{Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		in := bytes.Repeat([]byte("x"), 3<<20)
		errc := make(chan error, 1)
		go func() {
			_, err := a.Stdin().Write(in)
			if cerr := a.Stdin().Close(); err == nil {
				err = cerr
			}
			errc <- err
		}()
		out, _, ex := readAll(t, a)
		if err := <-errc; err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(len(in)) || exitCode(ex) != 0 {
			t.Fatalf("wc -c of %d bytes: %q, exit %+v, write %v", len(in), out, ex, err)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		info, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", "tty; stty size; read x; stty size"}, TTY: &vm.TermSize{Rows: 24, Cols: 80}}, &vm.AttachOptions{Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if !info.TTY {
			t.Fatal("the process is not on a terminal")
		}
		var got bytes.Buffer
		readUntil(t, a.Stdout(), &got, "24 80")
		if !strings.HasPrefix(got.String(), "/dev/pts/") {
			t.Fatalf("tty printed %q", got.String())
		}
		if err := pm.ResizeProcess(ctx, info.ID, vm.TermSize{Rows: 50, Cols: 132}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Stdin().Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
		readUntil(t, a.Stdout(), &got, "50 132")
		rest, errOut, ex := readAll(t, a)
		if len(errOut) != 0 || exitCode(ex) != 0 {
			t.Fatalf("stderr %q, exit %+v", errOut, ex)
		}
		t.Logf("terminal session: %q", got.String()+string(rest))
	})

	t.Run("64 background processes re-attached", func(t *testing.T) {
		const n = 64
		ids := make([]string, n)
		for i := range ids {
			info, a, err := pm.StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", fmt.Sprintf("seq 1 %d; sleep 0.5; seq 1 3000", 2000+i)}}, nil)
			if err != nil || a != nil {
				t.Fatalf("start %d: %v", i, err)
			}
			ids[i] = info.ID
		}
		list, err := pm.ListProcesses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, p := range list {
			listed[p.ID] = !p.Attached
		}
		errc := make(chan error, n)
		for i, id := range ids {
			if !listed[id] {
				t.Fatalf("%s is not listed as detached", id)
			}
			go func() {
				a, err := pm.AttachProcess(ctx, id, vm.AttachOptions{})
				if err != nil {
					errc <- err
					return
				}
				out, err := io.ReadAll(a.Stdout())
				if err == nil {
					_, err = io.Copy(io.Discard, a.Stderr())
				}
				if err != nil {
					errc <- fmt.Errorf("%s: %w", id, err)
					return
				}
				wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				ex, err := a.Wait(wctx)
				d, _ := a.Dropped()
				want := append(seqOut(1, 2000+i), seqOut(1, 3000)...)
				if err != nil || d != 0 || !bytes.Equal(out, want) || exitCode(ex) != 0 {
					err = fmt.Errorf("%s: %d bytes of %d, dropped %d, exit %+v, %v", id, len(out), len(want), d, ex, err)
				}
				errc <- err
			}()
		}
		for range ids {
			if err := <-errc; err != nil {
				t.Error(err)
			}
		}
	})
}
