// Package processtest serves a fake of the sandbox process operations (sandbox::process::*,
// contract 1.2) on an in-process engine, for tests of their clients: processes are Go functions,
// their streams real engine channels carrying exactly what the adapter sends (binary output
// frames, a dropped message when the ring lost bytes, the exit message last; resize messages on
// stdin). It is for tests only: its functions are built-ins of an engine with no other policy,
// so anyone connected may call them.
package processtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
)

// The S-codes the fake answers with, as the adapter does.
const (
	codeInvalid   = "S001"
	codeNotFound  = "S002"
	codeNoProcess = "S230"
	codeNoTTY     = "S231"
	codeRunning   = "S232"
	codeExited    = "S233"
)

// Program is a fake process: it runs until it returns its exit.
type Program func(p *Proc) protocol.ProcessExit

// Proc is what a Program sees of its process.
type Proc struct {
	Argv []string
	Env  map[string]string
	// TTY is the terminal's size when the process runs on one, else nil.
	TTY *protocol.TerminalSize
	// Stdin is the input the caller wrote; EOF when it closed stdin (never without a stdin).
	Stdin io.Reader
	// Signals gets the signals sent to the process, as named by the caller.
	Signals <-chan string

	p *proc
}

// Size is the terminal's current size (resizes apply before the input that follows them).
func (pr *Proc) Size() protocol.TerminalSize {
	pr.p.mu.Lock()
	defer pr.p.mu.Unlock()
	return pr.p.size
}

// Stdout writes the process's output; it blocks while the attached reader does not take it.
func (pr *Proc) Stdout() io.Writer { return streamWriter{pr.p, 0} }

// Stderr writes the process's error output (on a terminal, the same stream as Stdout).
func (pr *Proc) Stderr() io.Writer {
	if pr.TTY != nil {
		return streamWriter{pr.p, 0}
	}
	return streamWriter{pr.p, 1}
}

// Server is the fake: an engine at URL serving sandbox::process::*, and sandbox::create and
// sandbox::stop (which kills the sandbox's processes).
type Server struct {
	URL string
	// RingBytes bounds what a detached process keeps per stream (0: unbounded).
	RingBytes int

	programs  map[string]Program
	w         *protocol.Worker
	close     func()
	closeOnce sync.Once

	mu        sync.Mutex
	sandboxes map[string]bool
	procs     map[string]*proc // by sandbox_id + "/" + process_id
	next      int
	stopped   []string
	created   []map[string]any
}

// Start serves the fake on a new engine until the test ends. programs are looked up by the
// first word of a process's argv; sandboxes are the ids that exist from the start.
func Start(tb testing.TB, programs map[string]Program, sandboxes ...string) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	e := core.New(core.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Serve(ctx, ln); close(done) }()
	s := &Server{URL: "ws://" + ln.Addr().String(), programs: programs, sandboxes: map[string]bool{}, procs: map[string]*proc{}}
	for _, id := range sandboxes {
		s.sandboxes[id] = true
	}
	// The functions are the engine's own here (sandbox::* is reserved to it); the worker only
	// creates and opens the channels, as the adapter's does.
	for fn, h := range map[string]protocol.Handler{
		protocol.FnSandboxProcessStart:  s.start,
		protocol.FnSandboxProcessAttach: s.attach,
		protocol.FnSandboxProcessList:   s.list,
		protocol.FnSandboxProcessWait:   s.wait,
		protocol.FnSandboxProcessSignal: s.signal,
		protocol.FnSandboxProcessResize: s.resize,
		"sandbox::create":               s.create,
		"sandbox::stop":                 s.stop,
	} {
		e.Handle(fn, "fake "+fn, func(ctx context.Context, _ core.Caller, in json.RawMessage) (any, error) { return h(ctx, in) })
	}
	s.w = protocol.NewWorker(protocol.Config{URL: s.URL, Name: "fake-sandbox", Namespace: protocol.DefaultNamespace})
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := s.w.Start(sctx); err != nil {
		tb.Fatal(err)
	}
	s.close = func() {
		// The engine goes first, as when it dies: no process's exit reaches a reader after it.
		cancel()
		<-done
		s.w.Close()
		s.mu.Lock()
		for _, p := range s.procs {
			p.kill()
		}
		s.mu.Unlock()
	}
	tb.Cleanup(s.Close)
	return s
}

// Close stops the engine, as an engine going away: every connection to it drops. The test's end
// closes it too; a second Close does nothing.
func (s *Server) Close() { s.closeOnce.Do(s.close) }

// Stopped lists the sandboxes sandbox::stop stopped.
func (s *Server) Stopped() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.stopped...)
}

// Created lists the requests of sandbox::create.
func (s *Server) Created() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.created...)
}

func fail(code, format string, args ...any) error { return protocol.NewError(code, format, args...) }

func (s *Server) create(_ context.Context, in json.RawMessage) (any, error) {
	var req map[string]any
	_ = json.Unmarshal(in, &req)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	id := fmt.Sprintf("sb-%d", s.next)
	s.sandboxes[id] = true
	s.created = append(s.created, req)
	img, _ := req["image"].(string)
	return map[string]string{"sandbox_id": id, "image": img}, nil
}

func (s *Server) stop(_ context.Context, in json.RawMessage) (any, error) {
	var req struct {
		SandboxID string `json:"sandbox_id"`
	}
	_ = json.Unmarshal(in, &req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sandboxes[req.SandboxID] {
		return nil, fail(codeNotFound, "sandbox not found: %s", req.SandboxID)
	}
	delete(s.sandboxes, req.SandboxID)
	s.stopped = append(s.stopped, req.SandboxID)
	for k, p := range s.procs {
		if strings.HasPrefix(k, req.SandboxID+"/") {
			p.kill()
		}
	}
	return map[string]any{"sandbox_id": req.SandboxID, "stopped": true}, nil
}

type startReq struct {
	protocol.ProcessRequest
	ProcessID string `json:"process_id"`
}

func (s *Server) start(_ context.Context, in json.RawMessage) (any, error) {
	var req startReq
	if err := json.Unmarshal(in, &req); err != nil {
		return nil, fail(codeInvalid, "invalid request: %s", err.Error())
	}
	argv := req.Argv
	if len(argv) == 0 && req.Cmd != "" {
		argv = append([]string{req.Cmd}, req.Args...)
	}
	if len(argv) == 0 {
		return nil, fail(codeInvalid, "invalid request: one of cmd or argv is required")
	}
	s.mu.Lock()
	if !s.sandboxes[req.SandboxID] {
		s.mu.Unlock()
		return nil, fail(codeNotFound, "sandbox not found: %s", req.SandboxID)
	}
	prog := s.programs[argv[0]]
	if prog == nil {
		s.mu.Unlock()
		return nil, fail("S200", "exec failed: %s: not found", argv[0])
	}
	s.next++
	p := &proc{
		s: s, id: fmt.Sprintf("p%d", s.next), pid: 100 + s.next, argv: argv, tty: req.TTY != nil,
		started: time.Now(), done: make(chan struct{}), sig: make(chan string, 16),
	}
	if req.TTY != nil {
		p.size = *req.TTY
	}
	p.stdinR, p.stdinW = io.Pipe()
	s.procs[req.SandboxID+"/"+p.id] = p
	s.mu.Unlock()

	var rep map[string]any
	if !req.Detached {
		var err error
		if rep, err = p.newAttachment(req.Stdin || req.TTY != nil); err != nil {
			return nil, err
		}
	} else {
		rep = map[string]any{}
	}
	if !req.Stdin && req.TTY == nil {
		_ = p.stdinW.Close() // /dev/null
	}
	rep["process_id"], rep["pid"] = p.id, p.pid
	env := req.Env
	go func() {
		e := prog(&Proc{Argv: argv, Env: env, TTY: req.TTY, Stdin: p.stdinR, Signals: p.sig, p: p})
		p.exited(e)
	}()
	return rep, nil
}

func (s *Server) find(in json.RawMessage) (*proc, map[string]any, error) {
	var req map[string]any
	if err := json.Unmarshal(in, &req); err != nil {
		return nil, nil, fail(codeInvalid, "invalid request: %s", err.Error())
	}
	sb, _ := req["sandbox_id"].(string)
	id, _ := req["process_id"].(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sandboxes[sb] {
		return nil, nil, fail(codeNotFound, "sandbox not found: %s", sb)
	}
	p := s.procs[sb+"/"+id]
	if p == nil {
		return nil, nil, fail(codeNoProcess, "process not found: %s in sandbox %s", id, sb)
	}
	return p, req, nil
}

func (s *Server) attach(_ context.Context, in json.RawMessage) (any, error) {
	p, req, err := s.find(in)
	if err != nil {
		return nil, err
	}
	stdin, _ := req["stdin"].(bool)
	rep, err := p.newAttachment(stdin || p.tty)
	if err != nil {
		return nil, err
	}
	rep["process_id"], rep["pid"] = p.id, p.pid
	return rep, nil
}

func (s *Server) list(_ context.Context, in json.RawMessage) (any, error) {
	var req struct {
		SandboxID string `json:"sandbox_id"`
	}
	_ = json.Unmarshal(in, &req)
	s.mu.Lock()
	if !s.sandboxes[req.SandboxID] {
		s.mu.Unlock()
		return nil, fail(codeNotFound, "sandbox not found: %s", req.SandboxID)
	}
	var ps []*proc
	for k, p := range s.procs {
		if strings.HasPrefix(k, req.SandboxID+"/") {
			ps = append(ps, p)
		}
	}
	s.mu.Unlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	out := []protocol.ProcessInfo{}
	for _, p := range ps {
		p.mu.Lock()
		info := protocol.ProcessInfo{ProcessID: p.id, PID: p.pid, Argv: p.argv, TTY: p.tty, State: "running",
			StartedAtMS: p.started.UnixMilli(), Attached: p.att != nil}
		if p.exit != nil {
			info.State, info.ExitCode, info.Signal, info.TimedOut = "exited", p.exit.ExitCode, p.exit.Signal, p.exit.TimedOut
		}
		p.mu.Unlock()
		out = append(out, info)
	}
	return map[string]any{"processes": out}, nil
}

func (s *Server) wait(ctx context.Context, in json.RawMessage) (any, error) {
	p, req, err := s.find(in)
	if err != nil {
		return nil, err
	}
	d := 30 * time.Second
	if ms, ok := req["timeout_ms"].(float64); ok && ms > 0 {
		d = time.Duration(ms) * time.Millisecond
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return map[string]any{"exit_code": p.exit.ExitCode, "signal": nullable(p.exit.Signal), "timed_out": p.exit.TimedOut}, nil
	case <-t.C:
		return nil, fail(codeRunning, "process %s still running after %s", p.id, d)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Server) signal(_ context.Context, in json.RawMessage) (any, error) {
	p, req, err := s.find(in)
	if err != nil {
		return nil, err
	}
	name, _ := req["signal"].(string)
	if protocol.SignalNumber(name) == 0 {
		return nil, fail(codeInvalid, "invalid request: unknown signal %q", name)
	}
	select {
	case <-p.done:
		return nil, fail(codeExited, "process %s has exited", p.id)
	default:
	}
	select {
	case <-p.done:
		return nil, fail(codeExited, "process %s has exited", p.id)
	case p.sig <- name:
	}
	return map[string]any{}, nil
}

func (s *Server) resize(_ context.Context, in json.RawMessage) (any, error) {
	p, req, err := s.find(in)
	if err != nil {
		return nil, err
	}
	if !p.tty {
		return nil, fail(codeNoTTY, "process %s has no terminal", p.id)
	}
	rows, _ := req["rows"].(float64)
	cols, _ := req["cols"].(float64)
	p.mu.Lock()
	p.size = protocol.TerminalSize{Rows: int(rows), Cols: int(cols)}
	p.mu.Unlock()
	return map[string]any{}, nil
}

// proc is a fake process and its current attachment.
type proc struct {
	s       *Server
	id      string
	pid     int
	argv    []string
	tty     bool
	started time.Time
	sig     chan string
	done    chan struct{}
	stdinR  *io.PipeReader
	stdinW  *io.PipeWriter

	wmu sync.Mutex // orders output, replays and the exit

	mu      sync.Mutex
	att     *attachment
	ring    [2]bytes.Buffer
	dropped [2]int64
	exit    *protocol.ProcessExit
	killed  bool
	size    protocol.TerminalSize
}

// attachment is one caller's channels: the write ends of stdout and stderr, the read end of
// stdin.
type attachment struct {
	out [2]*protocol.ChannelWriter
	in  *protocol.ChannelReader
	// stop drops the stdin connection; readStdin, which reads it, is the one to Close it.
	stop context.CancelFunc
}

func (a *attachment) close() {
	for _, w := range a.out {
		if w != nil {
			_ = w.Close()
		}
	}
	a.stop()
}

// newAttachment makes the channels of a start or attach reply, takes over from the current
// attachment and replays the ring.
func (p *proc) newAttachment(stdin bool) (map[string]any, error) {
	ctx := context.Background()
	url := p.s.URL
	rep := map[string]any{}
	inCtx, stop := context.WithCancel(ctx)
	a := &attachment{stop: stop}
	streams := []string{"stdout", "stderr"}
	if p.tty {
		streams = streams[:1]
	}
	for i, name := range streams {
		r, w, err := p.s.w.CreateChannel(ctx)
		if err != nil {
			return nil, err
		}
		if a.out[i], err = protocol.DialWriter(ctx, url, w); err != nil {
			return nil, err
		}
		rep[name] = r
	}
	if stdin {
		r, w, err := p.s.w.CreateChannel(ctx)
		if err != nil {
			return nil, err
		}
		if a.in, err = protocol.DialReader(inCtx, url, r); err != nil {
			return nil, err
		}
		rep["stdin"] = w
	}
	p.mu.Lock()
	old := p.att
	p.att = nil
	p.mu.Unlock()
	if old != nil {
		old.close()
	}
	go p.replay(a)
	if a.in != nil {
		go p.readStdin(a)
	}
	return rep, nil
}

// replay sends the dropped count, the ring, and the exit when the process already ended; then
// makes a the live attachment.
func (p *proc) replay(a *attachment) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	dropped, exit := p.dropped, p.exit
	var held [2][]byte
	for i := range held {
		held[i] = bytes.Clone(p.ring[i].Bytes())
		p.ring[i].Reset()
	}
	p.dropped = [2]int64{}
	p.mu.Unlock()
	if dropped != [2]int64{} {
		b, _ := json.Marshal(map[string]any{"type": "dropped", "stdout": dropped[0], "stderr": dropped[1]})
		_ = a.out[0].SendMessage(string(b))
	}
	for i, b := range held {
		if len(b) > 0 && a.out[i] != nil {
			_, _ = a.out[i].Write(b)
		}
	}
	if exit != nil {
		p.sendExit(a, exit)
		return
	}
	p.mu.Lock()
	p.att = a
	p.mu.Unlock()
}

func (p *proc) sendExit(a *attachment, e *protocol.ProcessExit) {
	b, _ := json.Marshal(map[string]any{"type": "exit", "exit_code": e.ExitCode, "signal": nullable(e.Signal), "timed_out": e.TimedOut})
	_ = a.out[0].SendMessage(string(b))
	a.close()
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// readStdin copies a's stdin channel into the process: bytes to its input, resize messages to
// Resizes; the channel's normal end is EOF, any other end only the end of this attachment.
func (p *proc) readStdin(a *attachment) {
	defer a.in.Close() // before the end of the stream this aborts it: a bad message, or detached
	var bad bool
	a.in.OnMessage(func(msg string) {
		var m struct {
			Type       string `json:"type"`
			Rows, Cols int
		}
		if json.Unmarshal([]byte(msg), &m) != nil || m.Type != "resize" || !p.tty {
			bad = true
			return
		}
		p.mu.Lock()
		p.size = protocol.TerminalSize{Rows: m.Rows, Cols: m.Cols}
		p.mu.Unlock()
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := a.in.Read(buf)
		if bad {
			return
		}
		if n > 0 {
			if _, werr := p.stdinW.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err == io.EOF {
			_ = p.stdinW.Close()
			return
		}
		if err != nil {
			return
		}
	}
}

// write sends output of stream i to the attached reader, or to the ring without one (a failed
// write detaches).
func (p *proc) write(i int, b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	a, killed := p.att, p.killed
	p.mu.Unlock()
	if killed {
		return io.ErrClosedPipe
	}
	if a != nil && a.out[i] != nil {
		if _, err := a.out[i].Write(b); err == nil {
			return nil
		}
		p.mu.Lock()
		if p.att == a {
			p.att = nil
		}
		p.mu.Unlock()
		a.close()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ring[i].Write(b)
	if lim := p.s.RingBytes; lim > 0 && p.ring[i].Len() > lim {
		over := p.ring[i].Len() - lim
		p.dropped[i] += int64(over)
		p.ring[i].Next(over)
	}
	return nil
}

// exited records the exit and sends it to the attached reader.
func (p *proc) exited(e protocol.ProcessExit) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	if p.exit != nil {
		p.mu.Unlock()
		return
	}
	p.exit = &e
	a := p.att
	p.att = nil
	p.mu.Unlock()
	close(p.done)
	_ = p.stdinR.Close()
	if a != nil {
		p.sendExit(a, &e)
	}
}

// kill ends the process as its sandbox's stop does.
func (p *proc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	select {
	case p.sig <- "SIGKILL":
	default:
	}
	_ = p.stdinR.Close()
}

type streamWriter struct {
	p *proc
	i int
}

func (w streamWriter) Write(b []byte) (int, error) {
	if err := w.p.write(w.i, b); err != nil {
		return 0, err
	}
	return len(b), nil
}
