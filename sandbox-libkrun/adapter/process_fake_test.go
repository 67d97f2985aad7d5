package adapter

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

var _ vm.Processes = (*fakeMachine)(nil)

// fakeWindow is how many unread bytes an attached fake process may have per stream before its
// writes block, as the guest's credit window blocks a real one.
const fakeWindow = 64 << 10

// fakeProcs is the process table of a fake machine. A stream keeps every byte written (a test
// needs no bound); an attachment reads from the offset the last one took, and the ring is
// modelled by what a new attachment may still replay.
type fakeProcs struct {
	mu          sync.Mutex
	cond        *sync.Cond
	procs       map[string]*fakeProc
	order       []string
	next        int
	gens        int  // attachments made, so that each has its own generation
	unsupported bool // the agent predates processes
	startErr    error
	requests    []vm.ProcessRequest
	signals     []syscall.Signal
}

type fakeProc struct {
	info     vm.ProcessInfo
	ring     int
	streams  [2]fakeStream
	stdin    []byte
	stdinEOF bool
	size     vm.TermSize
	gen      int  // the current attachment's generation; 0: detached
	noStdin  bool // started detached: no input to attach to, as in the guest
}

type fakeStream struct {
	data  []byte
	taken int
}

func (m *fakeMachine) procTable() *fakeProcs {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.procs == nil {
		m.procs = &fakeProcs{procs: map[string]*fakeProc{}}
		m.procs.cond = sync.NewCond(&m.procs.mu)
	}
	return m.procs
}

func (m *fakeMachine) StartProcess(_ context.Context, req vm.ProcessRequest, attach *vm.AttachOptions) (vm.ProcessInfo, vm.Attachment, error) {
	t := m.procTable()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.unsupported {
		return vm.ProcessInfo{}, nil, vm.ErrProcessesUnsupported
	}
	if t.startErr != nil {
		return vm.ProcessInfo{}, nil, t.startErr
	}
	t.requests = append(t.requests, req)
	t.next++
	p := &fakeProc{info: vm.ProcessInfo{ID: "p" + strconv.Itoa(t.next), PID: 100 + t.next, Argv: req.Argv, TTY: req.TTY != nil,
		StartedAt: time.Unix(1_700_000_000, 0)}, ring: req.RingBytes}
	if req.TTY != nil {
		p.size = *req.TTY
	}
	t.procs[p.info.ID] = p
	t.order = append(t.order, p.info.ID)
	if attach == nil {
		p.noStdin = true
		return p.info, nil, nil
	}
	return p.info, t.attachLocked(p, *attach), nil
}

func (t *fakeProcs) attachLocked(p *fakeProc, opt vm.AttachOptions) *fakeAttachment {
	t.gens++
	p.gen = t.gens
	a := &fakeAttachment{t: t, p: p, gen: p.gen, stdin: opt.Stdin}
	for i := range p.streams {
		s := &p.streams[i]
		if lost := len(s.data) - s.taken - p.ring; p.ring > 0 && lost > 0 {
			a.dropped[i] = int64(lost)
			s.taken += lost
		}
	}
	t.cond.Broadcast()
	return a
}

func (m *fakeMachine) AttachProcess(_ context.Context, id string, opt vm.AttachOptions) (vm.Attachment, error) {
	t := m.procTable()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.unsupported {
		return nil, vm.ErrProcessesUnsupported
	}
	p, ok := t.procs[id]
	if !ok {
		return nil, &vm.ProcessError{Code: vm.ProcessNotFound, Message: "no process " + id}
	}
	if opt.Stdin && p.noStdin && !p.info.TTY {
		return nil, &vm.ProcessError{Code: vm.ProcessNoStdin, Message: "process " + id + " has no standard input"}
	}
	return t.attachLocked(p, opt), nil
}

func (m *fakeMachine) ListProcesses(context.Context) ([]vm.ProcessInfo, error) {
	t := m.procTable()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.unsupported {
		return nil, vm.ErrProcessesUnsupported
	}
	var out []vm.ProcessInfo
	for _, id := range t.order {
		p := t.procs[id]
		info := p.info
		info.Attached = p.gen > 0
		out = append(out, info)
	}
	return out, nil
}

func (m *fakeMachine) SignalProcess(_ context.Context, id string, sig syscall.Signal) error {
	t := m.procTable()
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[id]
	if !ok {
		return &vm.ProcessError{Code: vm.ProcessNotFound, Message: "no process " + id}
	}
	if p.info.Exit != nil {
		return &vm.ProcessError{Code: vm.ProcessExited, Message: "process " + id + " has exited"}
	}
	t.signals = append(t.signals, sig)
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		p.info.Exit = &vm.ProcessExit{Signal: int(sig)}
		t.cond.Broadcast()
	}
	return nil
}

func (m *fakeMachine) WaitProcess(ctx context.Context, id string) (vm.ProcessExit, error) {
	t := m.procTable()
	stop := context.AfterFunc(ctx, func() { t.mu.Lock(); t.cond.Broadcast(); t.mu.Unlock() })
	defer stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[id]
	if !ok {
		return vm.ProcessExit{}, &vm.ProcessError{Code: vm.ProcessNotFound, Message: "no process " + id}
	}
	for p.info.Exit == nil {
		if ctx.Err() != nil {
			return vm.ProcessExit{}, ctx.Err()
		}
		t.cond.Wait()
	}
	return *p.info.Exit, nil
}

func (m *fakeMachine) ResizeProcess(_ context.Context, id string, size vm.TermSize) error {
	t := m.procTable()
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[id]
	if !ok {
		return &vm.ProcessError{Code: vm.ProcessNotFound, Message: "no process " + id}
	}
	if !p.info.TTY {
		return &vm.ProcessError{Code: vm.ProcessNoTTY, Message: "process " + id + " has no terminal"}
	}
	p.size = size
	return nil
}

// write is the process writing b to stream i (0 stdout, 1 stderr): while attached it blocks as
// long as fakeWindow bytes are unread; detached, it never blocks.
func (t *fakeProcs) write(id string, i int, b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.procs[id]
	for len(b) > 0 {
		s := &p.streams[i]
		if p.gen > 0 && len(s.data)-s.taken >= fakeWindow {
			t.cond.Wait()
			continue
		}
		k := len(b)
		if p.gen > 0 {
			k = min(k, fakeWindow-(len(s.data)-s.taken))
		}
		s.data = append(s.data, b[:k]...)
		b = b[k:]
		t.cond.Broadcast()
	}
}

// exit ends process id with code.
func (t *fakeProcs) exit(id string, code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.procs[id].info.Exit = &vm.ProcessExit{ExitCode: &code}
	t.cond.Broadcast()
}

// unread is how many bytes of stream i of process id no attachment has taken yet.
func (t *fakeProcs) unread(id string, i int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.procs[id].streams[i]
	return len(s.data) - s.taken
}

func (t *fakeProcs) proc(id string) fakeProc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return *t.procs[id]
}

func (t *fakeProcs) attachedGen(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[id].gen
}

var errDetached = errors.New("attachment detached")

type fakeAttachment struct {
	t       *fakeProcs
	p       *fakeProc
	gen     int
	stdin   bool
	dropped [2]int64
	gone    bool
}

func (a *fakeAttachment) stream(i int) io.Reader {
	return readerFunc(func(b []byte) (int, error) { return a.read(i, b) })
}
func (a *fakeAttachment) Stdout() io.Reader { return a.stream(0) }
func (a *fakeAttachment) Stderr() io.Reader { return a.stream(1) }

func (a *fakeAttachment) read(i int, b []byte) (int, error) {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	for {
		if a.gone || a.p.gen != a.gen {
			return 0, errDetached
		}
		s := &a.p.streams[i]
		if n := len(s.data) - s.taken; n > 0 {
			k := copy(b, s.data[s.taken:])
			s.taken += k
			a.t.cond.Broadcast()
			return k, nil
		}
		if a.p.info.Exit != nil {
			return 0, io.EOF
		}
		a.t.cond.Wait()
	}
}

func (a *fakeAttachment) Stdin() io.WriteCloser {
	if !a.stdin {
		return nil
	}
	return &fakeStdin{a}
}

type fakeStdin struct{ a *fakeAttachment }

func (w *fakeStdin) Write(b []byte) (int, error) {
	w.a.t.mu.Lock()
	defer w.a.t.mu.Unlock()
	w.a.p.stdin = append(w.a.p.stdin, b...)
	w.a.t.cond.Broadcast()
	return len(b), nil
}

func (w *fakeStdin) Close() error {
	w.a.t.mu.Lock()
	defer w.a.t.mu.Unlock()
	w.a.p.stdinEOF = true
	w.a.t.cond.Broadcast()
	return nil
}

func (a *fakeAttachment) Dropped() (int64, int64) { return a.dropped[0], a.dropped[1] }

func (a *fakeAttachment) Wait(ctx context.Context) (vm.ProcessExit, error) {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	if a.p.info.Exit == nil {
		return vm.ProcessExit{}, errors.New("still running")
	}
	return *a.p.info.Exit, nil
}

func (a *fakeAttachment) Detach() {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	a.gone = true
	if a.p.gen == a.gen {
		a.p.gen = 0
	}
	a.t.cond.Broadcast()
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }
