package protocol_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/protocol/processtest"
)

func client(t *testing.T, s *processtest.Server) *protocol.Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := protocol.Connect(ctx, protocol.Config{URL: s.URL, Name: "t-client", Namespace: protocol.DefaultNamespace, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func codeOf(err error) string {
	var e *protocol.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// blocks waits for a signal and ends killed by it.
func blocks(p *processtest.Proc) protocol.ProcessExit {
	return processtest.Killed(<-p.Signals)
}

// Stdout and Stderr carry every byte in order, the messages stay out of them, and the exit comes
// from the exit message after the last byte, without a wait call.
func TestProcessStreamsAndExit(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16*10) // 3 MiB and more, several frames
	s := processtest.Start(t, map[string]processtest.Program{
		"gen": func(p *processtest.Proc) protocol.ProcessExit {
			for b := big; len(b) > 0; {
				k := min(len(b), 100000)
				if _, err := p.Stdout().Write(b[:k]); err != nil {
					return processtest.Killed("SIGPIPE")
				}
				b = b[k:]
			}
			fmt.Fprint(p.Stderr(), "warning: done")
			return processtest.Exit(3)
		},
	}, "sb")
	w := client(t, s)
	ctx := testCtx(t)
	p, err := w.StartProcess(ctx, protocol.ProcessRequest{SandboxID: "sb", Cmd: "gen"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.ID == "" || p.PID == 0 || p.Stdin != nil || p.Stderr == nil {
		t.Fatalf("handle %+v", p)
	}
	errc := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p.Stderr); errc <- b }()
	out, err := io.ReadAll(p.Stdout)
	if err != nil || !bytes.Equal(out, big) {
		t.Fatalf("stdout: %d bytes (want %d), %v", len(out), len(big), err)
	}
	if got := <-errc; string(got) != "warning: done" {
		t.Fatalf("stderr %q", got)
	}
	if e := p.Exited(); e == nil || e.ExitCode == nil || *e.ExitCode != 3 {
		t.Fatalf("exit after stdout ended: %+v", e)
	}
	e, err := p.Wait(ctx)
	if err != nil || e.Code() != 3 || e.Signal != "" || e.TimedOut {
		t.Fatalf("wait: %+v %v", e, err)
	}
}

// Stdin carries the input and its Close is EOF to the process.
func TestProcessStdin(t *testing.T) {
	s := processtest.Start(t, map[string]processtest.Program{"cat": processtest.Cat}, "sb")
	w := client(t, s)
	ctx := testCtx(t)
	p, err := w.StartProcess(ctx, protocol.ProcessRequest{SandboxID: "sb", Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := io.WriteString(p.Stdin, "hello\nworld\n"); err != nil {
		t.Fatal(err)
	}
	if err := p.Stdin.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p.Stdout)
	if err != nil || string(out) != "hello\nworld\n" {
		t.Fatalf("stdout %q, %v", out, err)
	}
	if e, err := p.Wait(ctx); err != nil || e.Code() != 0 {
		t.Fatalf("wait %+v %v", e, err)
	}
}

// A terminal process: output on Stdout only, resizes through the stdin channel's message, and
// through sandbox::process::resize for a handle without stdin; resizing a process without a
// terminal is S231.
func TestProcessTerminal(t *testing.T) {
	s := processtest.Start(t, map[string]processtest.Program{"sh": processtest.Shell, "cat": processtest.Cat}, "sb")
	w := client(t, s)
	ctx := testCtx(t)
	p, err := w.StartProcess(ctx, protocol.ProcessRequest{SandboxID: "sb", Argv: []string{"sh"}, TTY: &protocol.TerminalSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Stderr != nil || p.Stdin == nil {
		t.Fatalf("a terminal has stdout and stdin only: %+v", p)
	}
	if err := p.Resize(ctx, 40, 120); err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin, "stty size\r")
	screen := readUntil(t, p.Stdout, "40 120\r\n")
	if err := w.ResizeProcess(ctx, "sb", p.ID, 50, 132); err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin, "stty size\rexit 7\r")
	out, err := io.ReadAll(p.Stdout)
	if err != nil || !strings.Contains(string(out), "50 132\r\n") {
		t.Fatalf("screen %q then %q, %v", screen, out, err)
	}
	if e, _ := p.Wait(ctx); e.Code() != 7 {
		t.Fatalf("exit %+v", e)
	}

	c, err := w.StartProcess(ctx, protocol.ProcessRequest{SandboxID: "sb", Argv: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Resize(ctx, 10, 10); codeOf(err) != "S231" {
		t.Fatalf("resize without a terminal: %v", err)
	}
}

// A detached process keeps its output in the ring; an attach gets what the ring still holds,
// with the dropped count, then the exit once a signal ended the process (128+15).
func TestProcessDetachedAttach(t *testing.T) {
	wrote := make(chan struct{})
	s := processtest.Start(t, map[string]processtest.Program{
		"srv": func(p *processtest.Proc) protocol.ProcessExit {
			fmt.Fprint(p.Stdout(), "0123456789abcdef")
			close(wrote)
			return blocks(p)
		},
	}, "sb")
	s.RingBytes = 10
	w := client(t, s)
	ctx := testCtx(t)
	d, err := w.StartProcess(ctx, protocol.ProcessRequest{SandboxID: "sb", Cmd: "srv", Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Stdout != nil || d.Stderr != nil || d.Stdin != nil {
		t.Fatalf("a detached start has no streams: %+v", d)
	}
	<-wrote
	ps, err := w.ListProcesses(ctx, "sb")
	if err != nil || len(ps) != 1 || ps[0].ProcessID != d.ID || ps[0].State != "running" || ps[0].Attached {
		t.Fatalf("list %+v %v", ps, err)
	}
	p, err := w.AttachProcess(ctx, "sb", d.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	buf := make([]byte, 10)
	if _, err := io.ReadFull(p.Stdout, buf); err != nil || string(buf) != "6789abcdef" {
		t.Fatalf("replay %q %v", buf, err)
	}
	if o, e := p.Dropped(); o != 6 || e != 0 {
		t.Fatalf("dropped %d %d", o, e)
	}
	if err := p.Signal(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(p.Stdout); err != nil || len(rest) != 0 {
		t.Fatalf("rest %q %v", rest, err)
	}
	e, err := p.Wait(ctx)
	if err != nil || e.ExitCode != nil || e.Signal != "SIGTERM" || e.Code() != 143 {
		t.Fatalf("exit %+v %v", e, err)
	}
	if err := p.Signal(ctx, "TERM"); codeOf(err) != "S233" {
		t.Fatalf("signal after the exit: %v", err)
	}
}

// After Detach the process goes on; Wait then asks sandbox::process::wait, whose deadline
// passing is S232 while the process runs; an unknown signal is S001, an unknown process S230.
func TestProcessDetachAndWait(t *testing.T) {
	s := processtest.Start(t, map[string]processtest.Program{"srv": blocks}, "sb")
	w := client(t, s)
	ctx := testCtx(t)
	p, err := w.StartProcess(ctx, protocol.ProcessRequest{SandboxID: "sb", Cmd: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() { _, err := io.ReadAll(p.Stdout); readErr <- err }()
	p.Detach() // while Stdout is being read
	p.Detach()
	if err := <-readErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("a read after Detach: %v", err)
	}
	if _, err := w.WaitProcess(ctx, "sb", p.ID, 50*time.Millisecond); codeOf(err) != protocol.ProcessStillRunning {
		t.Fatalf("wait on a running process: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := p.Wait(short); codeOf(err) != protocol.ProcessStillRunning && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its context: %v", err)
	}
	if err := p.Signal(ctx, "SIGNOPE"); codeOf(err) != "S001" {
		t.Fatalf("unknown signal: %v", err)
	}
	if err := w.SignalProcess(ctx, "sb", "p999", "KILL"); codeOf(err) != "S230" {
		t.Fatalf("unknown process: %v", err)
	}
	if err := p.Signal(ctx, "9"); err != nil {
		t.Fatal(err)
	}
	e, err := p.Wait(ctx)
	if err != nil || e.Signal != "9" && e.Signal != "SIGKILL" || e.Code() != 137 {
		t.Fatalf("exit %+v %v", e, err)
	}
}

// readUntil reads r until what it read contains want; the stream's end first fails the test.
func readUntil(t *testing.T, r io.Reader, want string) string {
	t.Helper()
	var got []byte
	b := make([]byte, 4096)
	for !strings.Contains(string(got), want) {
		n, err := r.Read(b)
		got = append(got, b[:n]...)
		if err != nil {
			t.Fatalf("read %q, then %v; want %q", got, err, want)
		}
	}
	return string(got)
}

func TestProcessExitCode(t *testing.T) {
	two := 2
	for _, c := range []struct {
		e    protocol.ProcessExit
		want int
	}{
		{protocol.ProcessExit{ExitCode: &two}, 2},
		{protocol.ProcessExit{Signal: "SIGKILL"}, 137},
		{protocol.ProcessExit{Signal: "INT"}, 130},
		{protocol.ProcessExit{Signal: "SIG40"}, 168},
		{protocol.ProcessExit{Signal: "SIGWHAT"}, 128},
	} {
		if got := c.e.Code(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.e, got, c.want)
		}
	}
}
