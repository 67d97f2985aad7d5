package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/internal/base/errcode"
)

// The router functions of sandbox processes (contract 1.2). Whoever may call sandbox::exec may
// call them: the engine's default namespace, or an RBAC session granted sandbox::* or these ids.
const (
	FnSandboxProcessStart  = "sandbox::process::start"
	FnSandboxProcessAttach = "sandbox::process::attach"
	FnSandboxProcessList   = "sandbox::process::list"
	FnSandboxProcessWait   = "sandbox::process::wait"
	FnSandboxProcessSignal = "sandbox::process::signal"
	FnSandboxProcessResize = "sandbox::process::resize"
)

// ProcessStillRunning is the S-code sandbox::process::wait answers when its deadline passed
// before the process exited (retryable; the process goes on).
const ProcessStillRunning = "S232"

// maxProcessWait is the sandbox's default wait, the longest one sandbox::process::wait call
// takes; Process.Wait repeats the call past it.
const maxProcessWait = 30 * time.Second

// ProcessRequest is the request of sandbox::process::start. Cmd (with Args) or Argv names the
// command, as sandbox::exec takes it.
type ProcessRequest struct {
	SandboxID string            `json:"sandbox_id"`
	Cmd       string            `json:"cmd,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Argv      []string          `json:"argv,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	// TimeoutMS bounds the process; 0 leaves it unbounded (it ends with its sandbox).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Stdin asks for a stdin channel (Process.Stdin); without it the process reads /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TTY runs the process on a pseudo-terminal of that size: its output all comes on Stdout and
	// it has a Stdin.
	TTY *TerminalSize `json:"tty,omitempty"`
	// Detached starts the process without channels: its output goes to the sandbox's ring until
	// AttachProcess.
	Detached bool `json:"detached,omitempty"`
}

// TerminalSize is the size of a process's pseudo-terminal, 1..1000 each.
type TerminalSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// ProcessExit is how a sandbox process ended: its exit code, or the signal that killed it (named
// as "SIGTERM"), and whether its timeout_ms killed it.
type ProcessExit struct {
	ExitCode *int   `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out"`
}

// Code is the exit status a shell would report: the exit code, else 128 plus the signal's number
// on Linux (128 alone for a signal this table does not know).
func (e ProcessExit) Code() int {
	if e.ExitCode != nil {
		return *e.ExitCode
	}
	if e.Signal == "" {
		return 128
	}
	return 128 + SignalNumber(e.Signal)
}

// linuxSignals are the numbers of the Linux signals sandbox guests report by name.
var linuxSignals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8, "KILL": 9,
	"USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15, "STKFLT": 16,
	"CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24,
	"XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29, "PWR": 30, "SYS": 31,
}

// SignalNumber is the Linux number of a signal named "SIGTERM", "TERM" or "15"; 0 when unknown.
func SignalNumber(name string) int {
	name = strings.TrimPrefix(strings.ToUpper(name), "SIG")
	if n, err := strconv.Atoi(name); err == nil && n > 0 && n <= 64 {
		return n
	}
	return linuxSignals[name]
}

// ProcessInfo is one entry of sandbox::process::list.
type ProcessInfo struct {
	ProcessID   string   `json:"process_id"`
	PID         int      `json:"pid"`
	Argv        []string `json:"argv"`
	TTY         bool     `json:"tty"`
	State       string   `json:"state"` // "running" or "exited"
	ExitCode    *int     `json:"exit_code"`
	Signal      string   `json:"signal,omitempty"`
	TimedOut    bool     `json:"timed_out"`
	StartedAtMS int64    `json:"started_at_ms"`
	Attached    bool     `json:"attached"`
}

// processReply is the reply of sandbox::process::start and ::attach.
type processReply struct {
	ProcessID string      `json:"process_id"`
	PID       int         `json:"pid"`
	Stdout    *ChannelRef `json:"stdout"`
	Stderr    *ChannelRef `json:"stderr"`
	Stdin     *ChannelRef `json:"stdin"`
}

// Process is a handle on a process running in a sandbox, from StartProcess or AttachProcess.
//
// Stdout and Stderr are the process's output as it comes (nil when the process was started
// detached; Stderr nil on a terminal, whose output is all on Stdout); they end with io.EOF after
// the last byte, or when the attachment was detached (another attach took over, or Detach). Read
// them: the guest only reads a process's output as fast as its reader takes it, so an unread
// Stdout blocks the process. Stdin, when asked for, writes the process's input; its Close sends
// EOF. The handle holds only channels: the process outlives it, and Detach or a lost connection
// leaves it running in its sandbox, to be attached again by id.
type Process struct {
	// ID is the process's id in its sandbox; PID its pid in the guest.
	ID        string
	PID       int
	SandboxID string

	Stdout io.Reader
	Stderr io.Reader
	Stdin  io.WriteCloser

	w      *Worker
	cancel context.CancelFunc
	out    *ChannelReader
	errR   *ChannelReader
	in     *ChannelWriter

	mu      sync.Mutex
	exit    *ProcessExit
	dropped [2]int64
	bad     error // a message on stdout this handle could not read
}

// StartProcess starts a process in a sandbox (sandbox::process::start) and opens the channels of
// its reply. ctx bounds the call and the opening of the channels, not the process or its streams.
// The engine lets the worker do it when it may call sandbox::exec; a sandbox's refusal is an
// *Error with its S-code.
func (w *Worker) StartProcess(ctx context.Context, req ProcessRequest) (*Process, error) {
	if req.SandboxID == "" {
		return nil, errcode.New(errcode.InvalidArguments, "%s: sandbox_id is required", FnSandboxProcessStart)
	}
	raw, err := w.Call(ctx, FnSandboxProcessStart, req)
	if err != nil {
		return nil, err
	}
	return w.openProcess(ctx, req.SandboxID, FnSandboxProcessStart, raw)
}

// AttachProcess attaches to a process of a sandbox (sandbox::process::attach): its streams replay
// what the previous attachment's reader had not taken (what the sandbox's ring still holds; see
// Process.Dropped) and go on live. An earlier attachment's streams end without an exit.
func (w *Worker) AttachProcess(ctx context.Context, sandboxID, processID string, stdin bool) (*Process, error) {
	raw, err := w.Call(ctx, FnSandboxProcessAttach, map[string]any{"sandbox_id": sandboxID, "process_id": processID, "stdin": stdin})
	if err != nil {
		return nil, err
	}
	return w.openProcess(ctx, sandboxID, FnSandboxProcessAttach, raw)
}

func (w *Worker) openProcess(ctx context.Context, sandboxID, fn string, raw json.RawMessage) (p *Process, err error) {
	var rep processReply
	if err := json.Unmarshal(raw, &rep); err != nil || rep.ProcessID == "" {
		return nil, fmt.Errorf("%s reply %s: not a process", fn, raw)
	}
	// The streams live as long as the handle, not as the call's ctx; the dials obey ctx.
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	p = &Process{ID: rep.ProcessID, PID: rep.PID, SandboxID: sandboxID, w: w, cancel: cancel}
	defer func() {
		if err != nil {
			p.Detach()
		}
	}()
	if rep.Stdout != nil {
		if p.out, err = DialReader(life, w.cfg.URL, *rep.Stdout); err != nil {
			return nil, fmt.Errorf("process %s stdout: %w", rep.ProcessID, err)
		}
		p.out.OnMessage(p.message)
		p.Stdout = stdoutReader{p}
	}
	if rep.Stderr != nil {
		if p.errR, err = DialReader(life, w.cfg.URL, *rep.Stderr); err != nil {
			return nil, fmt.Errorf("process %s stderr: %w", rep.ProcessID, err)
		}
		p.errR.OnMessage(func(string) {}) // messages come on stdout only; keep text out of the bytes
		p.Stderr = p.errR
	}
	if rep.Stdin != nil {
		if p.in, err = DialWriter(life, w.cfg.URL, *rep.Stdin); err != nil {
			return nil, fmt.Errorf("process %s stdin: %w", rep.ProcessID, err)
		}
		p.Stdin = p.in
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return p, nil
}

// message reads a text frame of stdout: the dropped count first, the exit last. A type this
// handle does not know is left alone, so a later contract can add messages; one that is not JSON
// ends the stream with an error naming it.
func (p *Process) message(msg string) {
	var m struct {
		Type   string `json:"type"`
		Stdout int64  `json:"stdout"`
		Stderr int64  `json:"stderr"`
		ProcessExit
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := json.Unmarshal([]byte(msg), &m); err != nil {
		p.bad = fmt.Errorf("process %s: stdout message %.80q is not JSON", p.ID, msg)
		return
	}
	switch m.Type {
	case "dropped":
		p.dropped = [2]int64{m.Stdout, m.Stderr}
	case "exit":
		e := m.ProcessExit
		p.exit = &e
	}
}

// Dropped is how many bytes of stdout and stderr the sandbox's ring had lost before this
// attachment (known once the first byte or the end of Stdout was read).
func (p *Process) Dropped() (stdout, stderr int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped[0], p.dropped[1]
}

// Exited is the process's exit once Stdout has delivered it; nil before.
func (p *Process) Exited() *ProcessExit {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return nil
	}
	e := *p.exit
	return &e
}

// Wait returns how the process ended: from the exit message once Stdout ended with one, else by
// asking the sandbox (sandbox::process::wait, repeated while it answers that the process still
// runs) until ctx ends. It does not read Stdout: a process whose output nobody reads may block.
func (p *Process) Wait(ctx context.Context) (ProcessExit, error) {
	if e := p.Exited(); e != nil {
		return *e, nil
	}
	for {
		// Without a nearer deadline each call takes the sandbox's default wait, which the
		// adapter keeps within its max_exec_timeout_ms.
		var d time.Duration
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < maxProcessWait {
			if d = time.Until(dl); d < time.Millisecond {
				return ProcessExit{}, fmt.Errorf("process %s: %w", p.ID, context.DeadlineExceeded)
			}
		}
		e, err := p.w.WaitProcess(ctx, p.SandboxID, p.ID, d)
		var perr *Error
		if errors.As(err, &perr) && perr.Code == ProcessStillRunning && ctx.Err() == nil {
			if x := p.Exited(); x != nil {
				return *x, nil
			}
			continue
		}
		return e, err
	}
}

// Signal sends a signal ("SIGTERM", "TERM" or a number) to the process's group.
func (p *Process) Signal(ctx context.Context, signal string) error {
	return p.w.SignalProcess(ctx, p.SandboxID, p.ID, signal)
}

// Resize changes the size of the process's terminal: a message on Stdin when the handle has one,
// else sandbox::process::resize.
func (p *Process) Resize(ctx context.Context, rows, cols int) error {
	if p.in != nil {
		b, _ := json.Marshal(map[string]any{"type": "resize", "rows": rows, "cols": cols})
		return p.in.SendMessage(string(b))
	}
	return p.w.ResizeProcess(ctx, p.SandboxID, p.ID, rows, cols)
}

// Detach lets go of the process: its streams close without an exit and Stdin is abandoned
// without EOF, so the process goes on, its output kept in the sandbox's ring for the next
// AttachProcess. A Read of Stdout or Stderr then returns context.Canceled. Safe to call more
// than once, while another goroutine reads, and after the process exited.
func (p *Process) Detach() {
	// Ending the streams' context drops their connections (the channels' own Close must not run
	// beside a Read); the adapter sees its reader gone and detaches.
	p.cancel()
}

// Close is Detach, so a Process is an io.Closer; to end the process, Signal it.
func (p *Process) Close() error {
	p.Detach()
	return nil
}

// stdoutReader is Process.Stdout: the channel's bytes, ending with an error once a message on
// it could not be read.
type stdoutReader struct{ p *Process }

func (r stdoutReader) Read(b []byte) (int, error) {
	n, err := r.p.out.Read(b)
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if r.p.bad != nil {
		return n, r.p.bad
	}
	return n, err
}

// ListProcesses lists the processes of a sandbox (sandbox::process::list).
func (w *Worker) ListProcesses(ctx context.Context, sandboxID string) ([]ProcessInfo, error) {
	raw, err := w.Call(ctx, FnSandboxProcessList, map[string]string{"sandbox_id": sandboxID})
	if err != nil {
		return nil, err
	}
	var rep struct {
		Processes []ProcessInfo `json:"processes"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		return nil, fmt.Errorf("%s reply: %w", FnSandboxProcessList, err)
	}
	return rep.Processes, nil
}

// WaitProcess waits up to timeout (0: the sandbox's default of 30 s) for a process to exit
// (sandbox::process::wait). A process still running then is an *Error with code S232
// (ProcessStillRunning), and goes on.
func (w *Worker) WaitProcess(ctx context.Context, sandboxID, processID string, timeout time.Duration) (ProcessExit, error) {
	req := map[string]any{"sandbox_id": sandboxID, "process_id": processID}
	var opts []CallOption
	if timeout > 0 {
		req["timeout_ms"] = timeout.Milliseconds()
		opts = append(opts, WithTimeout(timeout+5*time.Second))
	} else {
		opts = append(opts, WithTimeout(maxProcessWait+5*time.Second))
	}
	raw, err := w.Call(ctx, FnSandboxProcessWait, req, opts...)
	if err != nil {
		return ProcessExit{}, err
	}
	var e ProcessExit
	if err := json.Unmarshal(raw, &e); err != nil {
		return ProcessExit{}, fmt.Errorf("%s reply: %w", FnSandboxProcessWait, err)
	}
	return e, nil
}

// SignalProcess sends a signal to a process's group (sandbox::process::signal).
func (w *Worker) SignalProcess(ctx context.Context, sandboxID, processID, signal string) error {
	_, err := w.Call(ctx, FnSandboxProcessSignal, map[string]string{"sandbox_id": sandboxID, "process_id": processID, "signal": signal})
	return err
}

// ResizeProcess resizes a process's terminal (sandbox::process::resize).
func (w *Worker) ResizeProcess(ctx context.Context, sandboxID, processID string, rows, cols int) error {
	_, err := w.Call(ctx, FnSandboxProcessResize, map[string]any{"sandbox_id": sandboxID, "process_id": processID, "rows": rows, "cols": cols})
	return err
}
