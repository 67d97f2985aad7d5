package adapter

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// procHarness is an adapter wired to a real engine's channels (of opts) with one python sandbox
// whose fake machine runs processes.
func procHarness(t *testing.T, opts core.Options, mutate func(*settings.Settings)) (*harness, *protocol.Worker, *fakeProcs, string) {
	t.Helper()
	w := engineWorker(t, opts)
	h := newHarness(t, mutate, nil)
	h.svc.opt.Channels = w
	id := h.create(t, `{"image":"python"}`)
	return h, w, h.drv.machines[0].procTable(), id
}

// stream reads one output channel to its end in the background: its bytes, its messages and,
// for each message, how many bytes had come before it.
type stream struct {
	mu   sync.Mutex
	data []byte
	msgs []string
	at   []int
	err  error
	done chan struct{}
}

func readStream(t *testing.T, w *protocol.Worker, ref any) *stream {
	t.Helper()
	rd, err := protocol.DialReader(context.Background(), w.URL(), refOf(t, ref))
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{done: make(chan struct{})}
	rd.OnMessage(func(m string) {
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		s.at = append(s.at, len(s.data))
		s.mu.Unlock()
	})
	go func() {
		defer close(s.done)
		defer rd.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := rd.Read(buf)
			s.mu.Lock()
			s.data = append(s.data, buf[:n]...)
			s.mu.Unlock()
			if err != nil {
				if err != io.EOF {
					s.err = err
				}
				return
			}
		}
	}()
	return s
}

func (s *stream) wait(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end")
	}
}

func pre(id string) string { return `{"sandbox_id":"` + id + `"` }

// TestProcessStreamsOutputThenExit: a started process's stdout and stderr reach their
// channels whole, with no cap, and the exit message comes on stdout after its last byte.
func TestProcessStreamsOutputThenExit(t *testing.T) {
	h, w, procs, id := procHarness(t, core.Options{}, nil)
	r := h.mustCall(t, "process::start", pre(id)+`,"cmd":"pytest -x","env":{"A":"1"}}`)
	if r["process_id"] != "p1" || r["pid"] != float64(101) || r["stdout"] == nil || r["stderr"] == nil || r["stdin"] != nil {
		t.Fatalf("reply %v", r)
	}
	req := procs.requests[0]
	if strings.Join(req.Argv, " ") != "pytest -x" || strings.Join(req.Env, ",") != "A=1" || req.Timeout != 0 || req.RingBytes != 1<<20 || req.TTY != nil {
		t.Fatalf("request %+v", req)
	}
	out, errs := readStream(t, w, r["stdout"]), readStream(t, w, r["stderr"])
	want := make([]byte, 3<<20) // past exec's 1 MiB cap
	_, _ = rand.Read(want)
	go func() {
		procs.write("p1", 1, []byte("warning\n"))
		procs.write("p1", 0, want)
		procs.exit("p1", 3)
	}()
	out.wait(t)
	errs.wait(t)
	if out.err != nil || !bytes.Equal(out.data, want) || string(errs.data) != "warning\n" || errs.err != nil {
		t.Fatalf("stdout %d bytes (%v), stderr %q (%v)", len(out.data), out.err, errs.data, errs.err)
	}
	if len(out.msgs) != 1 || out.at[0] != len(want) || out.msgs[0] != `{"type":"exit","exit_code":3,"signal":null,"timed_out":false}` || len(errs.msgs) != 0 {
		t.Fatalf("messages %q at %v", out.msgs, out.at)
	}
}

// TestProcessSlowReaderBlocksProcess: a reader that does not read blocks the process's writes
// (the guest's window fills, nothing more is taken from it); once it reads, every byte arrives.
func TestProcessSlowReaderBlocksProcess(t *testing.T) {
	h, w, procs, id := procHarness(t, core.Options{}, nil)
	r := h.mustCall(t, "process::start", pre(id)+`,"argv":["sh","-c","yes"]}`)
	want := bytes.Repeat([]byte("y\n"), 3<<20) // 6 MiB, more than the channel and the window hold
	wrote := make(chan struct{})
	go func() { procs.write("p1", 0, want); procs.exit("p1", 0); close(wrote) }()
	enginetest.Eventually(t, "the process blocks on a full window", 10*time.Second, func() bool { return procs.unread("p1", 0) == fakeWindow })
	select {
	case <-wrote:
		t.Fatal("the process wrote everything with no one reading")
	default:
	}
	if n := len(procs.proc("p1").streams[0].data); n >= len(want) {
		t.Fatalf("%d bytes taken from the process with no reader", n)
	}
	out := readStream(t, w, r["stdout"])
	readStream(t, w, r["stderr"])
	out.wait(t)
	if !bytes.Equal(out.data, want) || len(out.msgs) != 1 || !strings.Contains(out.msgs[0], `"exit_code":0`) {
		t.Fatalf("%d bytes, messages %q", len(out.data), out.msgs)
	}
}

// TestProcessDetachedAttachReplaysRing: a detached process's output goes to its ring; an
// attach gets a dropped message first when the ring overflowed, then what it holds, then the
// live output and the exit.
func TestProcessDetachedAttachReplaysRing(t *testing.T) {
	h, w, procs, id := procHarness(t, core.Options{}, func(s *settings.Settings) { s.ProcessRingBytes = 1000 })
	r := h.mustCall(t, "process::start", pre(id)+`,"cmd":"python3","args":["-m","http.server"],"detached":true}`)
	if r["process_id"] != "p1" || r["stdout"] != nil || r["stderr"] != nil || procs.requests[0].RingBytes != 1000 {
		t.Fatalf("reply %v, request %+v", r, procs.requests[0])
	}
	procs.write("p1", 0, bytes.Repeat([]byte("a"), 500))
	procs.write("p1", 0, bytes.Repeat([]byte("b"), 1000))
	procs.write("p1", 1, []byte("log\n"))
	rows := h.mustCall(t, "process::list", pre(id)+`}`)["processes"].([]any)
	row := rows[0].(map[string]any)
	if len(rows) != 1 || row["process_id"] != "p1" || row["state"] != "running" || row["attached"] != false || row["exit_code"] != nil ||
		row["signal"] != nil || row["started_at_ms"] != float64(1_700_000_000_000) || row["tty"] != false {
		t.Fatalf("list %v", rows)
	}
	a := h.mustCall(t, "process::attach", pre(id)+`,"process_id":"p1"}`)
	if a["pid"] != float64(101) || a["stdin"] != nil {
		t.Fatalf("attach reply %v", a)
	}
	out, errs := readStream(t, w, a["stdout"]), readStream(t, w, a["stderr"])
	enginetest.Eventually(t, "the ring is replayed", 10*time.Second, func() bool { return procs.unread("p1", 0) == 0 && procs.unread("p1", 1) == 0 })
	if h.mustCall(t, "process::list", pre(id)+`}`)["processes"].([]any)[0].(map[string]any)["attached"] != true {
		t.Fatal("list does not show the attachment")
	}
	procs.write("p1", 0, []byte("live"))
	procs.exit("p1", 0)
	out.wait(t)
	errs.wait(t)
	if string(out.data) != strings.Repeat("b", 1000)+"live" || string(errs.data) != "log\n" {
		t.Fatalf("stdout %q, stderr %q", out.data, errs.data)
	}
	if len(out.msgs) != 2 || out.msgs[0] != `{"type":"dropped","stdout":500,"stderr":0}` || out.at[0] != 0 ||
		!strings.HasPrefix(out.msgs[1], `{"type":"exit"`) || out.at[1] != 1004 {
		t.Fatalf("messages %q at %v", out.msgs, out.at)
	}
	// An exited process: its ring is empty now, the exit comes at once.
	a = h.mustCall(t, "process::attach", pre(id)+`,"process_id":"p1"}`)
	out = readStream(t, w, a["stdout"])
	readStream(t, w, a["stderr"])
	out.wait(t)
	if len(out.data) != 0 || len(out.msgs) != 1 || !strings.Contains(out.msgs[0], `"exit_code":0`) {
		t.Fatalf("attach after exit: %q %q", out.data, out.msgs)
	}
}

// TestProcessAttachTakesOver: a second attach detaches the first, whose channels end without
// an exit message; the second gets the rest and the exit.
func TestProcessAttachTakesOver(t *testing.T) {
	h, w, procs, id := procHarness(t, core.Options{}, nil)
	r := h.mustCall(t, "process::start", pre(id)+`,"cmd":"server"}`)
	first, firstErr := readStream(t, w, r["stdout"]), readStream(t, w, r["stderr"])
	procs.write("p1", 0, []byte("one\n"))
	enginetest.Eventually(t, "the first reader gets the output", 10*time.Second, func() bool { first.mu.Lock(); defer first.mu.Unlock(); return len(first.data) == 4 })
	a := h.mustCall(t, "process::attach", pre(id)+`,"process_id":"p1"}`)
	first.wait(t)
	firstErr.wait(t)
	if string(first.data) != "one\n" || len(first.msgs) != 0 || first.err != nil {
		t.Fatalf("first attachment: %q %q %v", first.data, first.msgs, first.err)
	}
	second := readStream(t, w, a["stdout"])
	readStream(t, w, a["stderr"])
	procs.write("p1", 0, []byte("two\n"))
	procs.exit("p1", 0)
	second.wait(t)
	if string(second.data) != "two\n" || len(second.msgs) != 1 {
		t.Fatalf("second attachment: %q %q", second.data, second.msgs)
	}
}

// TestProcessReaderLeavesDetaches: a caller whose reader goes away detaches the process, which
// goes on into its ring; a later attach gets what it missed.
func TestProcessReaderLeavesDetaches(t *testing.T) {
	h, w, procs, id := procHarness(t, core.Options{}, nil)
	r := h.mustCall(t, "process::start", pre(id)+`,"cmd":"server"}`)
	rd, err := protocol.DialReader(context.Background(), w.URL(), refOf(t, r["stdout"]))
	if err != nil {
		t.Fatal(err)
	}
	errs := readStream(t, w, r["stderr"])
	procs.write("p1", 0, []byte("first\n"))
	if _, err := io.ReadFull(rd, make([]byte, 6)); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	errs.wait(t)
	enginetest.Eventually(t, "the process is detached", 10*time.Second, func() bool { return procs.attachedGen("p1") == 0 })
	procs.write("p1", 0, []byte("missed\n"))
	a := h.mustCall(t, "process::attach", pre(id)+`,"process_id":"p1"}`)
	out := readStream(t, w, a["stdout"])
	readStream(t, w, a["stderr"])
	enginetest.Eventually(t, "the missed output arrives", 10*time.Second, func() bool { out.mu.Lock(); defer out.mu.Unlock(); return string(out.data) == "missed\n" })
	procs.exit("p1", 0)
	out.wait(t)
}

// TestProcessReaderNeverComesDetaches: channels no one opens within the engine's attach
// deadline detach the process rather than holding it.
func TestProcessReaderNeverComesDetaches(t *testing.T) {
	h, _, procs, id := procHarness(t, core.Options{ChannelAttach: 200 * time.Millisecond}, nil)
	h.mustCall(t, "process::start", pre(id)+`,"cmd":"server"}`)
	if procs.attachedGen("p1") == 0 {
		t.Fatal("not attached after start")
	}
	enginetest.Eventually(t, "the process is detached", 10*time.Second, func() bool { return procs.attachedGen("p1") == 0 })
	procs.write("p1", 0, bytes.Repeat([]byte("x"), 4*fakeWindow)) // detached: the ring takes it, nothing blocks
}

// TestProcessStdinAndTerminal: a tty process gets TERM, a stdin channel and no stderr; input
// bytes reach it, a resize message resizes its terminal, the channel's end is end-of-file. A
// message of another kind ends the stdin channel without end-of-file.
func TestProcessStdinAndTerminal(t *testing.T) {
	h, w, procs, id := procHarness(t, core.Options{}, nil)
	r := h.mustCall(t, "process::start", pre(id)+`,"cmd":"bash","tty":{"rows":24,"cols":80}}`)
	if r["stdin"] == nil || r["stderr"] != nil || r["stdout"] == nil {
		t.Fatalf("reply %v", r)
	}
	if req := procs.requests[0]; *req.TTY != (vm.TermSize{Rows: 24, Cols: 80}) || !envHas(req.Env, "TERM") || req.Env[0] != "TERM=xterm-256color" {
		t.Fatalf("request %+v", req)
	}
	in, err := protocol.DialWriter(context.Background(), w.URL(), refOf(t, r["stdin"]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("ls\n")); err != nil {
		t.Fatal(err)
	}
	if err := in.SendMessage(`{"type":"resize","rows":50,"cols":132}`); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "input and resize arrive", 10*time.Second, func() bool {
		p := procs.proc("p1")
		return string(p.stdin) == "ls\n" && p.size == vm.TermSize{Rows: 50, Cols: 132}
	})
	in.Close()
	enginetest.Eventually(t, "end-of-file arrives", 10*time.Second, func() bool { return procs.proc("p1").stdinEOF })

	r = h.mustCall(t, "process::start", pre(id)+`,"cmd":"cat","stdin":true,"env":{"TERM":"dumb"}}`)
	if r["stdin"] == nil || r["stderr"] == nil || envHas(procs.requests[1].Env, "TERM=xterm") {
		t.Fatalf("reply %v", r)
	}
	in, err = protocol.DialWriter(context.Background(), w.URL(), refOf(t, r["stdin"]))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.SendMessage(`{"type":"eof"}`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("an unknown stdin message did not end the channel")
	}
	if procs.proc("p2").stdinEOF {
		t.Fatal("an unknown message was taken as end-of-file")
	}
}

// TestProcessControl: list, wait (S232 while running), signal by name and number, resize, and
// the codes of each failure.
func TestProcessControl(t *testing.T) {
	h, _, procs, id := procHarness(t, core.Options{}, nil)
	h.mustCall(t, "process::start", pre(id)+`,"cmd":"sleep 100","detached":true,"timeout_ms":0}`)
	h.mustCall(t, "process::start", pre(id)+`,"cmd":"top","detached":true,"tty":{"rows":1,"cols":1000},"timeout_ms":5000}`)
	if procs.requests[1].Timeout != 5*time.Second {
		t.Fatalf("timeout %v", procs.requests[1].Timeout)
	}
	p := `,"process_id":"p1"`
	_, e := h.call(t, "process::wait", pre(id)+p+`,"timeout_ms":20}`)
	wantCode(t, e, scode.S232, "process p1 in sandbox "+id+" is still running after 20ms")
	if !e.Retryable {
		t.Fatal("S232 is not retryable")
	}
	_, e = h.call(t, "process::resize", pre(id)+p+`,"rows":10,"cols":10}`)
	wantCode(t, e, scode.S231, "has no terminal")
	_, e = h.call(t, "process::attach", pre(id)+p+`,"stdin":true}`)
	wantCode(t, e, scode.S001, "has no standard input to attach to")
	h.mustCall(t, "process::resize", pre(id)+`,"process_id":"p2","rows":10,"cols":20}`)
	if procs.proc("p2").size != (vm.TermSize{Rows: 10, Cols: 20}) {
		t.Fatal("resize did not reach the process")
	}
	for _, sig := range []string{`"SIGHUP"`, `"int"`, `9`, `"34"`} {
		if sig == `9` {
			continue // SIGKILL would end p1 here; see below
		}
		h.mustCall(t, "process::signal", pre(id)+p+`,"signal":`+sig+`}`)
	}
	h.mustCall(t, "process::signal", pre(id)+p+`,"signal":"TERM"}`)
	if got := procs.signals; len(got) != 4 || got[0] != syscall.SIGHUP || got[1] != syscall.SIGINT || got[2] != syscall.Signal(34) || got[3] != syscall.SIGTERM {
		t.Fatalf("signals %v", got)
	}
	r := h.mustCall(t, "process::wait", pre(id)+p+`}`)
	if r["exit_code"] != nil || r["signal"] != "SIGTERM" || r["timed_out"] != false || r["type"] != nil {
		t.Fatalf("wait %v", r)
	}
	row := h.mustCall(t, "process::list", pre(id)+`}`)["processes"].([]any)[0].(map[string]any)
	if row["state"] != "exited" || row["signal"] != "SIGTERM" || row["argv"].([]any)[0] != "sleep" {
		t.Fatalf("list %v", row)
	}
	_, e = h.call(t, "process::signal", pre(id)+p+`,"signal":"SIGTERM"}`)
	wantCode(t, e, scode.S233, "has already exited")
	h.mustCall(t, "process::signal", pre(id)+`,"process_id":"p2","signal":9}`)

	for _, c := range []struct{ op, body, code, msg string }{
		{"process::signal", p + `,"signal":"SIGFOO"}`, scode.S001, `unknown signal "SIGFOO"`},
		{"process::signal", p + `,"signal":65}`, scode.S001, "signal must be 1..64"},
		{"process::signal", p + `}`, scode.S001, "signal is required"},
		{"process::wait", p + `,"timeout_ms":0}`, scode.S001, "timeout_ms must be at least 1"},
		{"process::wait", `,"process_id":"p9"}`, scode.S230, "process not found: p9 in sandbox " + id},
		{"process::attach", `,"process_id":"p9"}`, scode.S230, "process not found: p9"},
		{"process::signal", `,"process_id":"p9","signal":"INT"}`, scode.S230, "process not found: p9"},
		{"process::resize", `,"process_id":"p9","rows":1,"cols":1}`, scode.S230, "process not found: p9"},
		{"process::resize", p + `,"rows":0,"cols":1}`, scode.S001, "rows and cols must be 1..1000"},
		{"process::resize", p + `,"rows":1}`, scode.S001, "tty needs both rows and cols"},
		{"process::attach", `}`, scode.S001, "process_id is required"},
		{"process::start", `,"cmd":"x","detached":true,"stdin":true}`, scode.S001, "`stdin` cannot be combined with `detached`"},
		{"process::start", `,"cmd":"x","tty":{"rows":24,"cols":1001}}`, scode.S001, "tty rows and cols must be 1..1000"},
		{"process::start", `,"cmd":"x","tty":{"rows":24,"cols":80,"depth":8}}`, scode.S001, "unknown field"},
		{"process::start", `,"cmd":"x","detach":true}`, scode.S001, "unknown field \"detach\""},
		{"process::start", `}`, scode.S001, "cmd is required"},
		{"process::list", `,"x":1}`, scode.S001, "unknown field"},
	} {
		_, e := h.call(t, c.op, pre(id)+c.body)
		wantCode(t, e, c.code, c.msg)
	}
	_, e = h.call(t, "process::list", `{"sandbox_id":"00000000-0000-4000-8000-000000000000"}`)
	wantCode(t, e, scode.S002, "sandbox not found")
}

// TestProcessLimits: max_processes counts running processes only; the guest's own bound is S400
// too; a guest agent without processes is S219.
func TestProcessLimits(t *testing.T) {
	h, _, procs, id := procHarness(t, core.Options{}, func(s *settings.Settings) { s.MaxProcesses = 2 })
	h.mustCall(t, "process::start", pre(id)+`,"cmd":"a","detached":true}`)
	h.mustCall(t, "process::start", pre(id)+`,"cmd":"b","detached":true}`)
	_, e := h.call(t, "process::start", pre(id)+`,"cmd":"c","detached":true}`)
	wantCode(t, e, scode.S400, "max_processes (2) processes are running in sandbox "+id)
	_, e = h.call(t, "process::start", pre(id)+`,"cmd":"c"}`) // its channels are dropped with it
	wantCode(t, e, scode.S400, "max_processes (2)")
	procs.exit("p1", 0)
	h.mustCall(t, "process::start", pre(id)+`,"cmd":"c","detached":true}`)

	procs.mu.Lock()
	procs.startErr = &vm.ProcessError{Code: vm.ProcessLimit, Message: "1024 processes run"}
	procs.mu.Unlock()
	procs.exit("p2", 0)
	_, e = h.call(t, "process::start", pre(id)+`,"cmd":"d","detached":true}`)
	wantCode(t, e, scode.S400, "runs at most 1024 processes")

	procs.mu.Lock()
	procs.unsupported = true
	procs.mu.Unlock()
	for _, op := range []string{"start", "list", "attach"} {
		_, e = h.call(t, "process::"+op, pre(id)+`,"cmd":"x"}`)
		if op == "attach" {
			_, e = h.call(t, "process::attach", pre(id)+`,"process_id":"p1"}`)
		}
		if op == "list" {
			_, e = h.call(t, "process::list", pre(id)+`}`)
		}
		wantCode(t, e, scode.S219, "process operations unsupported")
	}
}

// TestProcessEndsWithSandbox: stopping a sandbox ends its attachments with an exit message
// naming SIGKILL; later calls are S004.
func TestProcessEndsWithSandbox(t *testing.T) {
	h, w, _, id := procHarness(t, core.Options{}, nil)
	r := h.mustCall(t, "process::start", pre(id)+`,"cmd":"server"}`)
	out, errs := readStream(t, w, r["stdout"]), readStream(t, w, r["stderr"])
	h.mustCall(t, "stop", pre(id)+`}`)
	out.wait(t)
	errs.wait(t)
	if len(out.msgs) != 1 || out.msgs[0] != `{"type":"exit","exit_code":null,"signal":"SIGKILL","timed_out":false}` {
		t.Fatalf("messages %q", out.msgs)
	}
	_, e := h.call(t, "process::list", pre(id)+`}`)
	wantCode(t, e, scode.S004, "sandbox already stopped")
}

// TestProcessAttachmentKeepsSandboxAlive: an attached stream counts as activity for the idle
// reaper; a detached process does not.
func TestProcessAttachmentKeepsSandboxAlive(t *testing.T) {
	h, w, procs, id := procHarness(t, core.Options{}, nil)
	r := h.mustCall(t, "process::start", pre(id)+`,"cmd":"server"}`)
	out, errs := readStream(t, w, r["stdout"]), readStream(t, w, r["stderr"])
	h.clock.Add(24 * time.Hour)
	h.svc.Reap()
	if stopped(t, h, id) {
		t.Fatal("reaped while a process stream was attached")
	}
	h.mustCall(t, "process::start", pre(id)+`,"cmd":"other","detached":true}`)
	procs.exit("p1", 0)
	out.wait(t)
	errs.wait(t)
	enginetest.Eventually(t, "the attachment is gone", 10*time.Second, func() bool { h.svc.mu.Lock(); defer h.svc.mu.Unlock(); return len(h.svc.boxes[id].atts) == 0 })
	h.clock.Add(24 * time.Hour)
	h.svc.Reap()
	if !stopped(t, h, id) {
		t.Fatal("a detached process kept its sandbox from being reaped")
	}
}

func stopped(t *testing.T, h *harness, id string) bool {
	t.Helper()
	for _, row := range h.mustCall(t, "list", `{}`)["sandboxes"].([]any) {
		if row := row.(map[string]any); row["sandbox_id"] == id {
			return row["stopped"] == true
		}
	}
	t.Fatalf("no sandbox %s", id)
	return false
}

func TestSignalNames(t *testing.T) {
	for in, want := range map[string]syscall.Signal{`"SIGTERM"`: 15, `"term"`: 15, `"SIGKILL"`: 9, `"WINCH"`: 28, `"SIGIOT"`: 6, `64`: 64, `"1"`: 1} {
		got, err := ParseSignal(json.RawMessage(in))
		if err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	if SignalName(15) != "SIGTERM" || SignalName(6) != "SIGABRT" || SignalName(29) != "SIGIO" || SignalName(34) != "SIG34" {
		t.Error("signal names")
	}
	var e *scode.Error
	if _, err := ParseSignal(json.RawMessage(`0`)); !errors.As(err, &e) || e.Code != scode.S001 {
		t.Errorf("0: %v", err)
	}
}

// failingChannels opens writers whose writes fail while fail is set, as when the reader left
// the moment the adapter had read a chunk from the guest.
type failingChannels struct {
	Channels
	fail *atomic.Bool
}

func (f failingChannels) OpenWriter(ctx context.Context, ref protocol.ChannelRef) (io.WriteCloser, error) {
	w, err := f.Channels.OpenWriter(ctx, ref)
	return failingWriter{w, f.fail}, err
}

type failingWriter struct {
	io.WriteCloser
	fail *atomic.Bool
}

func (w failingWriter) SendMessage(m string) error {
	return w.WriteCloser.(interface{ SendMessage(string) error }).SendMessage(m)
}

func (w failingWriter) Write(p []byte) (int, error) {
	if w.fail.Load() {
		return 0, errors.New("the reader left")
	}
	return w.WriteCloser.Write(p)
}

// TestProcessUnsentChunkGoesToNextAttach: a chunk the adapter took from the guest but could not
// hand to a departed reader is not lost: the next attach gets it first.
func TestProcessUnsentChunkGoesToNextAttach(t *testing.T) {
	h, w, procs, id := procHarness(t, core.Options{}, nil)
	var fail atomic.Bool
	fail.Store(true)
	h.svc.opt.Channels = failingChannels{w, &fail}
	h.mustCall(t, "process::start", pre(id)+`,"cmd":"server"}`)
	procs.write("p1", 0, []byte("taken but unsent\n"))
	enginetest.Eventually(t, "the process is detached", 10*time.Second, func() bool { return procs.attachedGen("p1") == 0 })
	procs.write("p1", 0, []byte("in the ring\n"))
	fail.Store(false)
	a := h.mustCall(t, "process::attach", pre(id)+`,"process_id":"p1"}`)
	out := readStream(t, w, a["stdout"])
	readStream(t, w, a["stderr"])
	procs.exit("p1", 0)
	out.wait(t)
	if string(out.data) != "taken but unsent\nin the ring\n" || len(out.msgs) != 1 {
		t.Fatalf("%q %q", out.data, out.msgs)
	}
}
