package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// Long-lived guest processes (vm.Processes, agent revision 9; the frames are those of
// proto/process.go). An attachment is three streams whose ids the host allocates: the guest's
// stdout and stderr, read as the streamed fs::read is (a Receiver granting credit as the bytes
// are taken, so the guest reads the process's pipes no faster than the host's reader), and
// the process's input, sent as fs::write sends a file, under the credit the guest grants.

var _ vm.Processes = (*machine)(nil)

// processRevision is the first agent revision that runs processes.
const processRevision = 9

// agentRevision is the revision number of an agent version ("iii-guest/9"), 0 when it has none.
func agentRevision(agent string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(agent, "iii-guest/"))
	if err != nil || !strings.HasPrefix(agent, "iii-guest/") {
		return 0
	}
	return n
}

// processes refuses the call of a machine whose agent predates processes.
func (m *machine) processes() error {
	if agentRevision(m.agent) < processRevision {
		return vm.ErrProcessesUnsupported
	}
	return nil
}

// procCall sends a process request and decodes its result into out (when not nil); a refusal
// of the guest with a process code is a *vm.ProcessError.
func (m *machine) procCall(ctx context.Context, t proto.Type, req, out any) error {
	if err := m.processes(); err != nil {
		return err
	}
	res, err := m.request(ctx, t, req)
	if err != nil {
		var fe *vm.FSError
		if errors.As(err, &fe) {
			switch fe.Code {
			case vm.ProcessNotFound, vm.ProcessNoTTY, vm.ProcessExited, vm.ProcessLimit, vm.ProcessNoStdin:
				return &vm.ProcessError{Code: fe.Code, Message: fe.Message}
			}
		}
		return err
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(res, out)
}

// StartProcess starts req in the guest (vm.Processes).
func (m *machine) StartProcess(ctx context.Context, req vm.ProcessRequest, attach *vm.AttachOptions) (vm.ProcessInfo, vm.Attachment, error) {
	if err := m.processes(); err != nil {
		return vm.ProcessInfo{}, nil, err
	}
	if len(req.Argv) == 0 {
		return vm.ProcessInfo{}, nil, errors.New("vm: empty argv")
	}
	ps := proto.ProcStart{
		Argv:      req.Argv,
		Env:       append(append([]string(nil), m.spec.Env...), req.Env...),
		Workdir:   req.Workdir,
		TimeoutMS: req.Timeout.Milliseconds(),
		RingBytes: req.RingBytes,
	}
	if req.Timeout > 0 && ps.TimeoutMS == 0 {
		ps.TimeoutMS = 1
	}
	if ps.Workdir == "" {
		ps.Workdir = m.spec.Workdir
	}
	if req.TTY != nil {
		ps.TTY = &proto.TermSize{Rows: req.TTY.Rows, Cols: req.TTY.Cols}
	}
	var att *procAttachment
	if attach != nil {
		ps.Stdin = attach.Stdin && req.TTY == nil
		att = m.newAttachment(*attach)
		ps.Attach = &att.ids
	}
	var info proto.ProcInfo
	if err := m.procCall(ctx, proto.TypeProcStart, ps, &info); err != nil {
		if att != nil {
			att.Detach()
		}
		return vm.ProcessInfo{}, nil, err
	}
	if att == nil {
		return processInfo(info), nil, nil
	}
	att.proc = info.ID
	return processInfo(info), att, nil
}

// AttachProcess attaches to process id (vm.Processes).
func (m *machine) AttachProcess(ctx context.Context, id string, opt vm.AttachOptions) (vm.Attachment, error) {
	if err := m.processes(); err != nil {
		return nil, err
	}
	att := m.newAttachment(opt)
	att.proc = id
	var res proto.ProcAttached
	if err := m.procCall(ctx, proto.TypeProcAttach, proto.ProcAttach{ID: id, Streams: att.ids}, &res); err != nil {
		att.Detach()
		return nil, err
	}
	att.dropped = [2]int64{res.DroppedStdout, res.DroppedStderr}
	return att, nil
}

// ListProcesses lists the guest's processes (vm.Processes).
func (m *machine) ListProcesses(ctx context.Context) ([]vm.ProcessInfo, error) {
	var res proto.ProcListed
	if err := m.procCall(ctx, proto.TypeProcList, struct{}{}, &res); err != nil {
		return nil, err
	}
	out := make([]vm.ProcessInfo, 0, len(res.Processes))
	for _, p := range res.Processes {
		out = append(out, processInfo(p))
	}
	return out, nil
}

// SignalProcess signals the process group of process id (vm.Processes).
func (m *machine) SignalProcess(ctx context.Context, id string, sig syscall.Signal) error {
	return m.procCall(ctx, proto.TypeProcSignal, proto.ProcSignal{ID: id, Signal: int(sig)}, nil)
}

// WaitProcess waits until process id has exited (vm.Processes). The guest answers once it has;
// a ctx that ends first leaves the process running.
func (m *machine) WaitProcess(ctx context.Context, id string) (vm.ProcessExit, error) {
	var ex proto.ProcExit
	if err := m.procCall(ctx, proto.TypeProcWait, proto.ProcRef{ID: id}, &ex); err != nil {
		return vm.ProcessExit{}, err
	}
	return processExit(ex), nil
}

// ResizeProcess sets the window size of process id's terminal (vm.Processes).
func (m *machine) ResizeProcess(ctx context.Context, id string, size vm.TermSize) error {
	return m.procCall(ctx, proto.TypeProcResize, proto.ProcResize{ID: id, Size: proto.TermSize{Rows: size.Rows, Cols: size.Cols}}, nil)
}

func processInfo(p proto.ProcInfo) vm.ProcessInfo {
	in := vm.ProcessInfo{ID: p.ID, PID: p.PID, Argv: p.Argv, TTY: p.TTY, StartedAt: time.UnixMilli(p.StartedAtMS), Attached: p.Attached}
	if p.Exit != nil {
		ex := processExit(*p.Exit)
		in.Exit = &ex
	}
	return in
}

func processExit(e proto.ProcExit) vm.ProcessExit {
	return vm.ProcessExit{ExitCode: e.ExitCode, Signal: e.Signal, TimedOut: e.TimedOut}
}

// procAttachment is the host's end of one attachment (vm.Attachment).
type procAttachment struct {
	m       *machine
	proc    string
	ids     proto.ProcStreams
	out     [2]*procReader
	in      *procStdin
	dropped [2]int64

	exitOnce sync.Once
	exited   chan struct{} // closed once the guest's exit notice arrived
	exit     proto.ProcExit

	ctx    context.Context // cancelled by Detach, with errDetached as its cause
	cancel context.CancelCauseFunc
	once   sync.Once
}

var errDetached = errors.New("vm: the process attachment was detached")

// newAttachment allocates and registers the streams of an attachment before its request goes
// out, so that none of the guest's frames finds them missing.
func (m *machine) newAttachment(opt vm.AttachOptions) *procAttachment {
	a := &procAttachment{m: m, exited: make(chan struct{})}
	a.ctx, a.cancel = context.WithCancelCause(context.Background())
	for i := range a.out {
		id, st := m.openStream()
		a.out[i] = a.newReader(id, st)
	}
	a.ids.Stdout, a.ids.Stderr = a.out[0].id, a.out[1].id
	m.mu.Lock()
	m.pending[a.ids.Stdout].exit = a.onExit
	m.mu.Unlock()
	if opt.Stdin {
		id, st := m.openStream()
		a.ids.Stdin = id
		a.in = &procStdin{a: a, id: id, st: st}
	}
	return a
}

// onExit takes the guest's exit notice; it comes after the last Data frame of both streams.
func (a *procAttachment) onExit(payload []byte) {
	a.exitOnce.Do(func() {
		_ = json.Unmarshal(payload, &a.exit)
		close(a.exited)
	})
}

func (a *procAttachment) Stdout() io.Reader { return a.out[0] }
func (a *procAttachment) Stderr() io.Reader { return a.out[1] }

// Stdin is the process's input, nil when the attachment was not asked for it.
func (a *procAttachment) Stdin() io.WriteCloser {
	if a.in == nil {
		return nil
	}
	return a.in
}

func (a *procAttachment) Dropped() (stdout, stderr int64) { return a.dropped[0], a.dropped[1] }

// Wait returns how the process ended once its exit notice arrived and both streams were read to
// their end.
func (a *procAttachment) Wait(ctx context.Context) (vm.ProcessExit, error) {
	for _, ch := range []<-chan struct{}{a.exited, a.out[0].eof, a.out[1].eof} {
		select {
		case <-ch:
		case <-a.ctx.Done():
			return vm.ProcessExit{}, context.Cause(a.ctx)
		case <-a.m.connErr:
			return vm.ProcessExit{}, ErrStopped
		case <-ctx.Done():
			return vm.ProcessExit{}, ctx.Err()
		}
	}
	return processExit(a.exit), nil
}

// Detach ends the attachment: the host forgets its streams and tells the guest, which goes on
// filling the process's ring. Safe to call twice and after the process exited.
func (a *procAttachment) Detach() {
	a.once.Do(func() {
		select {
		case <-a.exited:
			// The guest ended the attachment itself; reads still to come see the queued frames.
		default:
			a.cancel(errDetached)
		}
		ids := []uint32{a.ids.Stdout, a.ids.Stderr}
		if a.in != nil {
			ids = append(ids, a.ids.Stdin)
		}
		for _, id := range ids {
			a.m.forget(id)
		}
		// An End on an output stream detaches the guest's attachment; one that already ended
		// drops it.
		_ = a.m.send(proto.EndFrame(a.ids.Stdout, "detached by the host"))
		_ = a.m.send(proto.EndFrame(a.ids.Stderr, "detached by the host"))
	})
}

// procReader is one output stream of an attachment.
type procReader struct {
	proto.Receiver
	id      uint32
	eof     chan struct{} // closed once the stream was read to its end
	eofOnce sync.Once
}

func (a *procAttachment) newReader(id uint32, st *proto.Stream) *procReader {
	m := a.m
	r := &procReader{id: id, eof: make(chan struct{})}
	r.Receiver = proto.Receiver{
		Next: func() (proto.Frame, error) {
			f, err := m.next(a.ctx, st)
			if err != nil && a.ctx.Err() != nil {
				err = context.Cause(a.ctx)
			}
			return f, err
		},
		Grant: func(n int) error {
			if err := m.send(proto.CreditFrame(id, n)); err != nil {
				return fmt.Errorf("%w: %w", ErrStopped, err)
			}
			return nil
		},
		AbortPrefix: "vm: the guest ended the process's output: ",
	}
	return r
}

// Read reads the stream, crediting a frame as soon as its last byte is read: the guest keeps
// what an attachment did not take for the next one.
func (r *procReader) Read(p []byte) (int, error) {
	n, err := r.Receiver.Read(p)
	if err == io.EOF {
		r.eofOnce.Do(func() { close(r.eof) })
	}
	if err == nil {
		err = r.Settle()
	}
	return n, err
}

// procStdin writes the process's input under the credit the guest grants.
type procStdin struct {
	a  *procAttachment
	id uint32
	st *proto.Stream

	mu     sync.Mutex
	closed bool
	err    error
}

// Write sends p in chunks, each once the guest has room for it.
func (w *procStdin) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, errors.New("vm: write to a closed process input")
	}
	written := 0
	for len(p) > 0 {
		if w.err != nil {
			return written, w.err
		}
		n := min(len(p), proto.StreamChunk)
		if err := w.credit(n); err != nil {
			w.err = err
			return written, err
		}
		if err := w.a.m.send(proto.Frame{Type: proto.TypeData, ID: w.id, Payload: p[:n]}); err != nil {
			w.err = fmt.Errorf("%w: %w", ErrStopped, err)
			return written, w.err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// credit takes n bytes of the window, waiting for the guest to grant them; the guest's End (the
// process exited, its input was closed, the attachment was detached) fails it.
func (w *procStdin) credit(n int) error {
	m := w.a.m
	for {
		if w.st.Win.TryTake(n) {
			return nil
		}
		select {
		case <-w.st.Win.More():
		case f := <-w.st.Frames:
			if f.Type == proto.TypeEnd {
				return fmt.Errorf("vm: the guest closed the process's input: %s", f.Payload)
			}
		case <-w.st.Stopped():
			return proto.ErrStreamWindow
		case <-w.a.ctx.Done():
			return context.Cause(w.a.ctx)
		case <-m.connErr:
			return ErrStopped
		}
	}
}

// Close sends end-of-file.
func (w *procStdin) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.a.m.send(proto.EndFrame(w.id, "")); err != nil {
		return fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return nil
}
