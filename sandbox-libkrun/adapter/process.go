package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Processes (contract 1.2). process::start runs a command in the guest and, unless detached,
// answers with the read ends of fresh engine channels for its stdout and stderr (stdout only on a
// terminal) and, with stdin or tty, the write end of one for its input. The adapter copies a
// chunk at a time between the guest's attachment and the channels: it reads the next chunk of a
// stream only once the channel took the last, and the guest reads a process's pipe only under
// the host's credit, so a slow reader blocks the process and nothing is lost or piles up here.
// Text messages ride on stdout: {"type":"dropped"} first when the ring overflowed before the
// attachment, {"type":"exit"} last after the last byte of both streams. An attachment ends
// without an exit message when it is detached: a later process::attach took over, or the caller
// went away (an output channel's reader left, or never came within the engine's attach
// deadline); the process goes on, its output into its ring. A process outlives its caller's
// connection, never its sandbox: stopping the sandbox kills it and ends its attachment with an
// exit message naming SIGKILL. While attached a sandbox is never reaped for idleness; a detached
// process alone does not keep it alive.

// ProcessDefaultWait is how long process::wait waits when its request names no timeout_ms.
const ProcessDefaultWait = 30 * time.Second

// maxTermSize bounds a terminal's rows and cols.
const maxTermSize = 1000

// ProcessOps are the process operations, without the process:: prefix.
var ProcessOps = []string{"start", "attach", "list", "wait", "signal", "resize"}

// TermRequest is a terminal size in a request.
type TermRequest struct {
	Rows *int `json:"rows"`
	Cols *int `json:"cols"`
}

// ProcessStartRequest is the body of process::start.
type ProcessStartRequest struct {
	SandboxID string          `json:"sandbox_id"`
	Cmd       string          `json:"cmd"`
	Args      []string        `json:"args"`
	Argv      []string        `json:"argv"`
	Env       json.RawMessage `json:"env"`
	Workdir   *string         `json:"workdir"`
	TimeoutMS *uint64         `json:"timeout_ms"`
	Stdin     bool            `json:"stdin"`
	TTY       *TermRequest    `json:"tty"`
	Detached  bool            `json:"detached"`
}

// ProcessAttachRequest is the body of process::attach.
type ProcessAttachRequest struct {
	SandboxID string `json:"sandbox_id"`
	ProcessID string `json:"process_id"`
	Stdin     bool   `json:"stdin"`
}

// ProcessReply is the reply of process::start and process::attach.
type ProcessReply struct {
	ProcessID string               `json:"process_id"`
	PID       int                  `json:"pid"`
	Stdout    *protocol.ChannelRef `json:"stdout,omitempty"`
	Stderr    *protocol.ChannelRef `json:"stderr,omitempty"`
	Stdin     *protocol.ChannelRef `json:"stdin,omitempty"`
}

// ProcessRow is one process of process::list.
type ProcessRow struct {
	ProcessID   string   `json:"process_id"`
	PID         int      `json:"pid"`
	Argv        []string `json:"argv"`
	TTY         bool     `json:"tty"`
	State       string   `json:"state"` // running or exited
	ExitCode    *int     `json:"exit_code"`
	Signal      *string  `json:"signal"`
	TimedOut    bool     `json:"timed_out"`
	StartedAtMS int64    `json:"started_at_ms"`
	Attached    bool     `json:"attached"`
}

// ProcessStatus is how a process ended: the reply of process::wait and the exit message.
type ProcessStatus struct {
	Type     string  `json:"type,omitempty"` // "exit" in the message
	ExitCode *int    `json:"exit_code"`
	Signal   *string `json:"signal"`
	TimedOut bool    `json:"timed_out"`
}

func status(e vm.ProcessExit) ProcessStatus {
	st := ProcessStatus{ExitCode: e.ExitCode, TimedOut: e.TimedOut}
	if e.ExitCode == nil {
		name := SignalName(e.Signal)
		st.Signal = &name
	}
	return st
}

// procAttach is the live host attachment of one process.
type procAttach struct {
	box    *sandbox
	id     string
	att    vm.Attachment
	killed atomic.Bool // the sandbox was stopped under it: its exit is SIGKILL
	once   sync.Once
	stop   context.CancelFunc // ends the stdin copy
	done   chan struct{}      // closed once its copies ended and its channels closed
}

// detach ends the attachment; the process goes on into its ring.
func (a *procAttach) detach() {
	a.once.Do(func() {
		a.att.Detach()
		a.stop()
	})
}

func (s *Service) processHandlers(h map[string]Handler) {
	h["process::start"] = s.ProcessStart
	h["process::attach"] = s.ProcessAttach
	h["process::list"] = s.ProcessList
	h["process::wait"] = s.ProcessWait
	h["process::signal"] = s.ProcessSignal
	h["process::resize"] = s.ProcessResize
}

// procMachine admits sandbox id and returns it with its machine's process interface.
func (s *Service) procMachine(sid string) (*sandbox, vm.Processes, error) {
	id, err := checkID(sid)
	if err != nil {
		return nil, nil, err
	}
	box, err := s.admit(id, false)
	if err != nil {
		return nil, nil, err
	}
	pm, ok := box.machine.(vm.Processes)
	if !ok {
		return nil, nil, procUnsupported()
	}
	return box, pm, nil
}

func procUnsupported() *scode.Error {
	return scode.New(scode.S219, "process operations unsupported by this sandbox's guest agent (it predates agent revision 9); "+
		"upgrade the sandbox adapter, whose guest agent runs processes, and create a new sandbox (see S219 docs)")
}

// checkProcess validates the sandbox_id and process_id every operation on a process names.
func checkProcess(sandboxID, processID string) error {
	if _, err := checkID(sandboxID); err != nil {
		return err
	}
	if processID == "" {
		return scode.Invalid("process_id is required (process::start's reply, or sandbox::process::list)")
	}
	return nil
}

// procFailure maps a guest failure of process pid to its S-code.
func procFailure(box *sandbox, pid string, err error) *scode.Error {
	if e, ok := scode.As(err); ok {
		return e
	}
	var pe *vm.ProcessError
	if errors.As(err, &pe) {
		switch pe.Code {
		case vm.ProcessNotFound:
			return scode.ProcessNotFound(box.id, pid)
		case vm.ProcessNoTTY:
			return scode.NoTerminal(box.id, pid)
		case vm.ProcessExited:
			return scode.ProcessExited(box.id, pid)
		case vm.ProcessNoStdin:
			return scode.Invalid(fmt.Sprintf("process %s of sandbox %s has no standard input to attach to: it was started without `stdin: true`, or its input was closed; attach without `stdin`", pid, box.id))
		case vm.ProcessLimit:
			return scode.Limit(fmt.Sprintf("the guest agent of sandbox %s runs at most %d processes: %s", box.id, vm.MaxGuestProcesses, pe.Message))
		}
	}
	if errors.Is(err, vm.ErrProcessesUnsupported) {
		return procUnsupported()
	}
	if machineDone(box.machine) {
		return scode.Stopped(box.id)
	}
	return scode.BootFailed("the sandbox's guest agent is unreachable: " + err.Error())
}

func procChannelAborted(detail string) *scode.Error {
	return scode.New(scode.S218, "process channel aborted: "+detail)
}

func termSize(t *TermRequest) (*vm.TermSize, error) {
	if t == nil {
		return nil, nil
	}
	if t.Rows == nil || t.Cols == nil {
		return nil, scode.Invalid("tty needs both rows and cols, e.g. {\"rows\": 24, \"cols\": 80}")
	}
	if *t.Rows < 1 || *t.Rows > maxTermSize || *t.Cols < 1 || *t.Cols > maxTermSize {
		return nil, scode.Invalid(fmt.Sprintf("tty rows and cols must be 1..%d, got rows=%d cols=%d", maxTermSize, *t.Rows, *t.Cols))
	}
	return &vm.TermSize{Rows: uint16(*t.Rows), Cols: uint16(*t.Cols)}, nil
}

// ProcessStart answers process::start.
func (s *Service) ProcessStart(ctx context.Context, raw json.RawMessage) (any, error) {
	var req ProcessStartRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	if _, err := checkID(req.SandboxID); err != nil {
		return nil, err
	}
	argv, err := resolveArgv(req.Cmd, req.Args, req.Argv)
	if err != nil {
		return nil, err
	}
	env, err := parseEnv(req.Env)
	if err != nil {
		return nil, err
	}
	tty, err := termSize(req.TTY)
	if err != nil {
		return nil, err
	}
	if req.Detached && req.Stdin {
		return nil, scode.Invalid("`stdin` cannot be combined with `detached` (a detached process has no channels); attach with stdin: true to write its input")
	}
	var timeout time.Duration
	if req.TimeoutMS != nil {
		timeout = time.Duration(*req.TimeoutMS) * time.Millisecond
	}
	box, pm, err := s.procMachine(req.SandboxID)
	if err != nil {
		return nil, err
	}
	if tty != nil && !envHas(env, "TERM") && !envHas(box.env, "TERM") {
		env = append(env, "TERM=xterm-256color")
	}
	if len(box.env) > 0 {
		env = append(append([]string(nil), box.env...), env...)
	}
	workdir := ""
	if req.Workdir != nil {
		workdir = *req.Workdir
	}
	preq := vm.ProcessRequest{Argv: argv, Env: env, Workdir: workdir, TTY: tty, Timeout: timeout, RingBytes: int(s.opt.Settings.ProcessRingBytes)}

	var ends *procChannels
	if !req.Detached {
		if ends, err = s.openProcChannels(ctx, tty != nil, req.Stdin || tty != nil); err != nil {
			return nil, err
		}
	}
	box.procMu.Lock()
	info, att, err := s.startLocked(ctx, box, pm, preq, ends)
	box.procMu.Unlock()
	if err != nil {
		if ends != nil {
			ends.abort("the process did not start")
		}
		return nil, err
	}
	reply := ProcessReply{ProcessID: info.ID, PID: info.PID}
	if ends != nil {
		s.attach(box, pm, info.ID, att, ends)
		ends.into(&reply)
	}
	return reply, nil
}

// startLocked checks max_processes against the guest's running processes and starts preq; the
// caller holds box.procMu, so two starts cannot both take the last place.
func (s *Service) startLocked(ctx context.Context, box *sandbox, pm vm.Processes, preq vm.ProcessRequest, ends *procChannels) (vm.ProcessInfo, vm.Attachment, error) {
	list, err := pm.ListProcesses(ctx)
	if err != nil {
		return vm.ProcessInfo{}, nil, procFailure(box, "", err)
	}
	running := 0
	for _, p := range list {
		if p.Exit == nil {
			running++
		}
	}
	if limit := s.opt.Settings.MaxProcesses; uint32(running) >= limit {
		return vm.ProcessInfo{}, nil, scode.Limit(fmt.Sprintf("max_processes (%d) processes are running in sandbox %s; wait for or signal one, or raise max_processes in the adapter's config_override", limit, box.id))
	}
	var opt *vm.AttachOptions
	if ends != nil {
		opt = &vm.AttachOptions{Stdin: ends.in != nil}
	}
	// ctx bounds the request to the guest; the attachment outlives it (it ends by Detach).
	info, att, err := pm.StartProcess(ctx, preq, opt)
	if err != nil {
		return vm.ProcessInfo{}, nil, procFailure(box, "", err)
	}
	if ends != nil && att == nil {
		return vm.ProcessInfo{}, nil, procFailure(box, info.ID, errors.New("the guest started the process without an attachment"))
	}
	return info, att, nil
}

func envHas(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// ProcessAttach answers process::attach.
func (s *Service) ProcessAttach(ctx context.Context, raw json.RawMessage) (any, error) {
	var req ProcessAttachRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	if err := checkProcess(req.SandboxID, req.ProcessID); err != nil {
		return nil, err
	}
	box, pm, err := s.procMachine(req.SandboxID)
	if err != nil {
		return nil, err
	}
	info, err := findProcess(ctx, box, pm, req.ProcessID)
	if err != nil {
		return nil, err
	}
	ends, err := s.openProcChannels(ctx, info.TTY, req.Stdin || info.TTY)
	if err != nil {
		return nil, err
	}
	att, err := pm.AttachProcess(ctx, req.ProcessID, vm.AttachOptions{Stdin: ends.in != nil})
	if err != nil {
		ends.abort("the attach failed")
		return nil, procFailure(box, req.ProcessID, err)
	}
	s.attach(box, pm, req.ProcessID, att, ends)
	reply := ProcessReply{ProcessID: req.ProcessID, PID: info.PID}
	ends.into(&reply)
	return reply, nil
}

func findProcess(ctx context.Context, box *sandbox, pm vm.Processes, id string) (vm.ProcessInfo, error) {
	list, err := pm.ListProcesses(ctx)
	if err != nil {
		return vm.ProcessInfo{}, procFailure(box, id, err)
	}
	for _, p := range list {
		if p.ID == id {
			return p, nil
		}
	}
	return vm.ProcessInfo{}, scode.ProcessNotFound(box.id, id)
}

// ProcessList answers process::list.
func (s *Service) ProcessList(ctx context.Context, raw json.RawMessage) (any, error) {
	var req struct {
		SandboxID string `json:"sandbox_id"`
	}
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	box, pm, err := s.procMachine(req.SandboxID)
	if err != nil {
		return nil, err
	}
	list, err := pm.ListProcesses(ctx)
	if err != nil {
		return nil, procFailure(box, "", err)
	}
	rows := make([]ProcessRow, 0, len(list))
	for _, p := range list {
		row := ProcessRow{ProcessID: p.ID, PID: p.PID, Argv: p.Argv, TTY: p.TTY, State: "running",
			StartedAtMS: p.StartedAt.UnixMilli(), Attached: p.Attached}
		if row.Argv == nil {
			row.Argv = []string{}
		}
		if p.Exit != nil {
			st := status(*p.Exit)
			row.State, row.ExitCode, row.Signal, row.TimedOut = "exited", st.ExitCode, st.Signal, st.TimedOut
		}
		rows = append(rows, row)
	}
	return map[string]any{"processes": rows}, nil
}

// ProcessWait answers process::wait: how the process ended, or S232 when it still runs at the
// deadline (timeout_ms, default ProcessDefaultWait, at most max_exec_timeout_ms).
func (s *Service) ProcessWait(ctx context.Context, raw json.RawMessage) (any, error) {
	var req struct {
		SandboxID string  `json:"sandbox_id"`
		ProcessID string  `json:"process_id"`
		TimeoutMS *uint64 `json:"timeout_ms"`
	}
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	if err := checkProcess(req.SandboxID, req.ProcessID); err != nil {
		return nil, err
	}
	wait := ProcessDefaultWait
	if req.TimeoutMS != nil {
		if *req.TimeoutMS == 0 {
			return nil, scode.Invalid("timeout_ms must be at least 1")
		}
		wait = time.Duration(*req.TimeoutMS) * time.Millisecond
	}
	if limit := time.Duration(s.opt.Settings.MaxExecTimeoutMS) * time.Millisecond; wait > limit {
		wait = limit
	}
	box, pm, err := s.procMachine(req.SandboxID)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ex, err := pm.WaitProcess(wctx, req.ProcessID)
	s.touch(box)
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return nil, scode.StillRunning(box.id, req.ProcessID, wait.String())
		}
		return nil, procFailure(box, req.ProcessID, err)
	}
	return status(ex), nil
}

// ProcessSignal answers process::signal: the signal goes to the process's group.
func (s *Service) ProcessSignal(ctx context.Context, raw json.RawMessage) (any, error) {
	var req struct {
		SandboxID string          `json:"sandbox_id"`
		ProcessID string          `json:"process_id"`
		Signal    json.RawMessage `json:"signal"`
	}
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	if err := checkProcess(req.SandboxID, req.ProcessID); err != nil {
		return nil, err
	}
	sig, err := ParseSignal(req.Signal)
	if err != nil {
		return nil, err
	}
	box, pm, err := s.procMachine(req.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := pm.SignalProcess(ctx, req.ProcessID, sig); err != nil {
		return nil, procFailure(box, req.ProcessID, err)
	}
	return struct{}{}, nil
}

// ProcessResize answers process::resize.
func (s *Service) ProcessResize(ctx context.Context, raw json.RawMessage) (any, error) {
	var req struct {
		SandboxID string `json:"sandbox_id"`
		ProcessID string `json:"process_id"`
		Rows      *int   `json:"rows"`
		Cols      *int   `json:"cols"`
	}
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	if err := checkProcess(req.SandboxID, req.ProcessID); err != nil {
		return nil, err
	}
	size, err := termSize(&TermRequest{Rows: req.Rows, Cols: req.Cols})
	if err != nil {
		return nil, err
	}
	box, pm, err := s.procMachine(req.SandboxID)
	if err != nil {
		return nil, err
	}
	if err := pm.ResizeProcess(ctx, req.ProcessID, *size); err != nil {
		return nil, procFailure(box, req.ProcessID, err)
	}
	return struct{}{}, nil
}

// procChannels are the adapter's ends of one attachment's channels, and the caller's.
type procChannels struct {
	out, errw      io.WriteCloser // errw is nil on a terminal
	in             io.ReadCloser  // nil without stdin
	outRef, errRef protocol.ChannelRef
	inRef          protocol.ChannelRef
	inCtx          context.Context // the stdin reader's; cancelling it ends the stdin channel
	inCancel       context.CancelFunc
	hasErr         bool
}

// openProcChannels creates the channels of an attachment and opens the adapter's ends: stdout,
// stderr unless tty, and stdin when asked. Their lifetime is the service's, not the request's.
func (s *Service) openProcChannels(ctx context.Context, tty, stdin bool) (*procChannels, error) {
	if s.opt.Channels == nil {
		return nil, procChannelAborted("this adapter has no engine connection for stream channels")
	}
	c := &procChannels{hasErr: !tty}
	c.inCtx, c.inCancel = context.WithCancel(s.streamCtx)
	fail := func(err error) (*procChannels, error) {
		c.abort("the channels could not be opened")
		return nil, procChannelAborted(channelDetail(err))
	}
	open := func(ref *protocol.ChannelRef, w *io.WriteCloser) error {
		rref, wref, err := s.opt.Channels.CreateChannel(ctx)
		if err != nil {
			return fmt.Errorf("cannot create a channel: %w", err)
		}
		if *w, err = s.opt.Channels.OpenWriter(s.streamCtx, wref); err != nil {
			return err
		}
		*ref = rref
		return nil
	}
	if err := open(&c.outRef, &c.out); err != nil {
		return fail(err)
	}
	if c.hasErr {
		if err := open(&c.errRef, &c.errw); err != nil {
			return fail(err)
		}
	}
	if stdin {
		rref, wref, err := s.opt.Channels.CreateChannel(ctx)
		if err != nil {
			return fail(fmt.Errorf("cannot create a channel: %w", err))
		}
		if c.in, err = s.opt.Channels.OpenReader(c.inCtx, rref); err != nil {
			return fail(err)
		}
		c.inRef = wref
	}
	return c, nil
}

// abort ends every channel opened so far with reason.
func (c *procChannels) abort(reason string) {
	for _, w := range []io.WriteCloser{c.out, c.errw} {
		if w != nil {
			_ = abortWriter(w, reason)
		}
	}
	c.inCancel()
}

func (c *procChannels) into(r *ProcessReply) {
	r.Stdout = &c.outRef
	if c.errw != nil {
		r.Stderr = &c.errRef
	}
	if c.in != nil {
		r.Stdin = &c.inRef
	}
}

// attach makes att the live attachment of process id (detaching the one before it) and starts
// copying between it and ends.
func (s *Service) attach(box *sandbox, pm vm.Processes, id string, att vm.Attachment, ends *procChannels) {
	a := &procAttach{box: box, id: id, att: att, stop: ends.inCancel, done: make(chan struct{})}
	s.mu.Lock()
	prev := box.atts[id]
	if box.atts == nil {
		box.atts = map[string]*procAttach{}
	}
	box.atts[id] = a
	pend := box.pending[id]
	delete(box.pending, id)
	stopped := box.stopped
	s.mu.Unlock()
	if prev != nil {
		prev.detach()
	}
	if stopped {
		a.killed.Store(true)
		a.detach()
	}
	s.streams.Add(1)
	go s.pump(a, pm, ends, pend)
}

// pending is output read from the guest that a departed reader did not take, at most a chunk
// per stream, handed to the next attachment first.
type pending [2][]byte

// maxPending bounds the processes of one sandbox that hold a pending chunk, so that processes
// whose readers left and which nobody attaches to again cannot pile chunks up.
const maxPending = 64

// pump copies one attachment's streams until the process ends (then the exit message) or the
// attachment is detached.
func (s *Service) pump(a *procAttach, pm vm.Processes, c *procChannels, pend pending) {
	defer s.streams.Done()
	defer close(a.done)
	finished := make(chan struct{})
	go watchCaller(a, c, finished)
	if c.in != nil {
		go s.feedStdin(a, pm, c)
	}
	if dOut, dErr := a.att.Dropped(); dOut > 0 || dErr > 0 {
		msg := struct {
			Type   string `json:"type"`
			Stdout int64  `json:"stdout"`
			Stderr int64  `json:"stderr"`
		}{"dropped", dOut, dErr}
		if err := sendMessage(c.out, msg); err != nil {
			a.detach()
		}
	}
	var errw io.Writer = c.errw
	if c.errw == nil {
		errw = io.Discard // a terminal's stderr is empty; it still has to reach its end
	}
	var out [2]copied
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); out[0] = copyStream(a, c.out, a.att.Stdout(), pend[0]) }()
	go func() { defer wg.Done(); out[1] = copyStream(a, errw, a.att.Stderr(), pend[1]) }()
	wg.Wait()
	s.settle(a, pending{out[0].lost, out[1].lost})
	close(finished)
	s.sendExit(a, c, out[0].whole && out[1].whole)
	_ = c.out.Close()
	if c.errw != nil {
		_ = c.errw.Close()
	}
	a.detach()
}

// watchCaller detaches a when the caller goes away before finished closes: an output
// channel's reader left, or it never came within the engine's attach deadline; either aborts
// the channel, which closes the adapter's end.
func watchCaller(a *procAttach, c *procChannels, finished <-chan struct{}) {
	var outGone, errGone <-chan struct{}
	if d, ok := c.out.(interface{ Done() <-chan struct{} }); ok {
		outGone = d.Done()
	}
	if d, ok := c.errw.(interface{ Done() <-chan struct{} }); ok && c.errw != nil {
		errGone = d.Done()
	}
	select {
	case <-outGone:
	case <-errGone:
	case <-finished:
		return
	}
	select {
	case <-finished:
	default:
		a.detach()
	}
}

// copied is how one stream's copy ended: whole when it reached the process's end of output;
// lost holds what the guest sent that the caller's channel did not take.
type copied struct {
	whole bool
	lost  []byte
}

// copyStream copies r (nil: nothing) into w, pend first, and detaches a when w fails.
func copyStream(a *procAttach, w io.Writer, r io.Reader, pend []byte) copied {
	if r == nil {
		return copied{whole: true}
	}
	if len(pend) > 0 {
		if n, err := w.Write(pend); err != nil {
			a.detach()
			return copied{lost: pend[n:]}
		}
	}
	buf := make([]byte, copyChunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if k, err := w.Write(buf[:n]); err != nil {
				a.detach()
				return copied{lost: append([]byte(nil), buf[k:n]...)}
			}
		}
		if rerr == io.EOF {
			return copied{whole: true}
		}
		if rerr != nil {
			return copied{}
		}
	}
}

// settle forgets a as its process's attachment, keeping what its reader did not take for the
// next one (within maxPending processes per sandbox).
func (s *Service) settle(a *procAttach, lost pending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.box.lastActive = s.opt.Now()
	if a.box.atts[a.id] != a {
		return
	}
	delete(a.box.atts, a.id)
	if lost[0] == nil && lost[1] == nil {
		return
	}
	if a.box.pending == nil {
		a.box.pending = map[string]pending{}
	}
	if len(a.box.pending) < maxPending {
		a.box.pending[a.id] = lost
		return
	}
	s.opt.Logf("sandbox %s: process %s: %d bytes its departed reader did not take are not kept (%d processes hold some already)",
		a.box.id, a.id, len(lost[0])+len(lost[1]), maxPending)
}

// sendExit sends the exit message: SIGKILL when the sandbox stopped under the attachment, the
// process's own exit once both streams were copied whole, none when it was detached.
func (s *Service) sendExit(a *procAttach, c *procChannels, whole bool) {
	switch {
	case a.killed.Load():
		kill := SignalName(int(syscall.SIGKILL))
		_ = sendMessage(c.out, ProcessStatus{Type: "exit", Signal: &kill})
	case whole:
		ctx, cancel := context.WithTimeout(s.streamCtx, stopTimeout)
		ex, err := a.att.Wait(ctx)
		cancel()
		if err != nil {
			s.opt.Logf("sandbox %s: process %s: no exit status after its output: %v", a.box.id, a.id, err)
			return
		}
		st := status(ex)
		st.Type = "exit"
		_ = sendMessage(c.out, st)
	}
}

// feedStdin copies the caller's stdin channel into the process: binary frames are its input,
// a {"type":"resize"} message resizes its terminal, the channel's normal end is end-of-file.
// Any other message ends the channel (the caller's writer sees it aborted); the process keeps
// its input open for a later attachment.
func (s *Service) feedStdin(a *procAttach, pm vm.Processes, c *procChannels) {
	in := a.att.Stdin()
	if in == nil {
		c.inCancel()
		return
	}
	if m, ok := c.in.(interface{ OnMessage(func(string)) }); ok {
		m.OnMessage(func(msg string) {
			var r struct {
				Type string `json:"type"`
				Rows *int   `json:"rows"`
				Cols *int   `json:"cols"`
			}
			bad := ""
			if err := json.Unmarshal([]byte(msg), &r); err != nil || r.Type != "resize" {
				bad = "the stdin channel takes input bytes and {\"type\":\"resize\",\"rows\",\"cols\"} messages, got " + shortJSON([]byte(msg))
			} else if size, err := termSize(&TermRequest{Rows: r.Rows, Cols: r.Cols}); err != nil {
				bad = "resize message: " + err.Error()
			} else if err := pm.ResizeProcess(c.inCtx, a.id, *size); err != nil {
				bad = "resize message: " + procFailure(a.box, a.id, err).Message
			}
			if bad != "" {
				s.opt.Logf("sandbox %s: process %s: stdin channel ended: %s", a.box.id, a.id, bad)
				c.inCancel()
			}
		})
	}
	_, err := io.CopyBuffer(in, c.in, make([]byte, copyChunk))
	if err == nil {
		_ = in.Close()
	}
	_ = c.in.Close()
}

func sendMessage(w io.Writer, v any) error {
	m, ok := w.(interface{ SendMessage(string) error })
	if !ok {
		return errors.New("the channel writer cannot send messages")
	}
	b, _ := json.Marshal(v)
	return m.SendMessage(string(b))
}

// endProcesses ends the attachments of a stopping sandbox: their processes die with it, so each
// ends with an exit message naming SIGKILL.
func endProcesses(box *sandbox) {
	for _, a := range box.atts {
		a.killed.Store(true)
		go a.detach()
	}
	box.pending = nil
}

// linuxSignals are the guest's (Linux) signal numbers by name, whatever the host: the adapter
// runs on macOS too, whose numbers differ.
var linuxSignals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "IOT": 6, "BUS": 7, "FPE": 8,
	"KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
	"STKFLT": 16, "CHLD": 17, "CLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21,
	"TTOU": 22, "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28,
	"IO": 29, "POLL": 29, "PWR": 30, "SYS": 31, "UNUSED": 31,
}

// signalNames is the name a signal number is reported by.
var signalNames = map[int]string{}

func init() {
	for name, n := range linuxSignals {
		switch name {
		case "IOT", "CLD", "POLL", "UNUSED":
			continue
		}
		signalNames[n] = "SIG" + name
	}
}

// SignalName is the name of Linux signal n ("SIGTERM"); one without a name is "SIG" and its
// number (a real-time signal, "SIG34").
func SignalName(n int) string {
	if name, ok := signalNames[n]; ok {
		return name
	}
	return "SIG" + strconv.Itoa(n)
}

// ParseSignal reads a signal of process::signal: a name with or without SIG ("SIGTERM",
// "TERM", any case) or a number 1..64.
func ParseSignal(raw json.RawMessage) (syscall.Signal, error) {
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		if n < 1 || n > 64 {
			return 0, scode.Invalid(fmt.Sprintf("signal must be 1..64, got %d", n))
		}
		return syscall.Signal(n), nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil || name == "" {
		return 0, scode.Invalid("signal is required: a name such as \"SIGTERM\" or \"TERM\", or a number 1..64")
	}
	if k, err := strconv.Atoi(name); err == nil && k >= 1 && k <= 64 {
		return syscall.Signal(k), nil
	}
	if n, ok := linuxSignals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]; ok {
		return syscall.Signal(n), nil
	}
	return 0, scode.Invalid(fmt.Sprintf("unknown signal %q: use a Linux signal name such as SIGTERM, SIGINT, SIGKILL or SIGHUP, or a number 1..64", name))
}
