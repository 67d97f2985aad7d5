//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
	"golang.org/x/sys/unix"
)

// Long-lived processes (revision 9, proto/process.go). Each runs in its own process group (a
// tty process in its own session) and outlives the host's attachments to it, never the
// machine. One goroutine per output pipe (pump) reads it into the stream's ring (ring.go):
// continuously while no host is attached, only under the host's credit while one is, so a slow
// host blocks the process and nothing it wrote is lost. One goroutine per attached stream
// (sendStream) sends what the ring holds beyond what the attachment sent, under the stream's
// window. Every table change and every ring change is under the process's mutex, and its cond
// wakes the goroutines waiting on them.

// procTable is the agent's processes.
type procTable struct {
	mu      sync.Mutex
	next    int
	procs   map[string]*process
	exited  []string // ids of the exited processes still remembered, oldest first
	running int
	outs    map[uint32]*attachment // the output stream ids of live attachments
}

func newProcTable() *procTable {
	return &procTable{procs: map[string]*process{}, outs: map[uint32]*attachment{}}
}

// process is one long-lived process.
type process struct {
	id      string
	pid     int
	argv    []string
	tty     *os.File // the terminal's master side, nil without one
	stdin   *os.File // what attachments write: a pipe's write end or the terminal's master; nil: /dev/null
	started time.Time
	reaped  chan struct{} // closed once the process was waited for

	mu       sync.Mutex
	cond     *sync.Cond
	out      [2]*outRing // stdout, stderr
	exit     *proto.ProcExit
	timedOut bool
	att      *attachment
}

// attachment is the host reader of a process that the agent knows of.
type attachment struct {
	p    *process
	ids  proto.ProcStreams
	in   *proto.Stream // the host's input, nil without it
	gone chan struct{} // closed when it is detached
}

func procErr(code, format string, args ...any) *proto.Error {
	return &proto.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// procReply answers request id with v, or with e when set.
func (a *agent) procReply(id uint32, v any, e *proto.Error) {
	if e != nil {
		a.sendJSON(proto.TypeReply, id, proto.Reply{Error: e})
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		a.replyErr(id, err)
		return
	}
	a.sendJSON(proto.TypeReply, id, proto.Reply{Result: b})
}

// answer answers the request frame f with what do makes of its payload.
func answer[Req, Res any](a *agent, f proto.Frame, do func(Req) (Res, *proto.Error)) {
	if req, ok := decodeFrame[Req](a, f); ok {
		res, e := do(req)
		a.procReply(f.ID, res, e)
	}
}

// noResult adapts a request answered by an error alone to answer, which replies {} when
// the error is nil.
func noResult[Req any](do func(Req) *proto.Error) func(Req) (struct{}, *proto.Error) {
	return func(req Req) (struct{}, *proto.Error) { return struct{}{}, do(req) }
}

// procRequest answers a process request frame; it runs on the read loop except where a
// request waits (ProcWait), and ProcStart/ProcAttach register their streams before the next
// frame is read, so the host's first Credit or Data finds them.
func (a *agent) procRequest(f proto.Frame) {
	switch f.Type {
	case proto.TypeProcStart:
		answer(a, f, a.procStart)
	case proto.TypeProcAttach:
		answer(a, f, a.procAttach)
	case proto.TypeProcList:
		a.procReply(f.ID, a.procList(), nil)
	case proto.TypeProcSignal:
		answer(a, f, noResult(a.procSignal))
	case proto.TypeProcResize:
		answer(a, f, noResult(a.procResize))
	case proto.TypeProcWait:
		req, ok := decodeFrame[proto.ProcRef](a, f)
		if !ok {
			return
		}
		p, e := a.lookupProc(req.ID)
		if e != nil {
			a.procReply(f.ID, nil, e)
			return
		}
		go func() {
			<-p.reaped
			p.mu.Lock()
			ex := *p.exit
			p.mu.Unlock()
			a.procReply(f.ID, ex, nil)
		}()
	}
}

func (a *agent) lookupProc(id string) (*process, *proto.Error) {
	t := a.procs
	t.mu.Lock()
	p := t.procs[id]
	t.mu.Unlock()
	if p == nil {
		return nil, procErr(vm.ProcessNotFound, "process %q: no such process in the guest", id)
	}
	return p, nil
}

// procStart starts req's process, attached to req.Attach when set.
func (a *agent) procStart(req proto.ProcStart) (proto.ProcInfo, *proto.Error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return proto.ProcInfo{}, &proto.Error{Message: "process: empty argv"}
	}
	if req.RingBytes > maxRingBytes {
		return proto.ProcInfo{}, &proto.Error{Message: fmt.Sprintf("process %q: ring_bytes %d exceeds the agent's %d", req.Argv[0], req.RingBytes, maxRingBytes)}
	}
	t := a.procs
	t.mu.Lock()
	if t.running >= vm.MaxGuestProcesses {
		t.mu.Unlock()
		return proto.ProcInfo{}, procErr(vm.ProcessLimit, "process %q: the guest already runs %d processes", req.Argv[0], vm.MaxGuestProcesses)
	}
	t.running++
	t.next++
	id := "p" + strconv.Itoa(t.next)
	t.mu.Unlock()
	p, pipes, err := a.spawnProcess(id, req)
	if err != nil {
		t.mu.Lock()
		t.running--
		t.mu.Unlock()
		return proto.ProcInfo{}, &proto.Error{Message: fmt.Sprintf("process %q: %v", req.Argv[0], err)}
	}
	t.mu.Lock()
	t.procs[id] = p
	t.mu.Unlock()
	if req.Attach != nil {
		p.mu.Lock()
		a.attachLocked(p, *req.Attach)
		p.mu.Unlock()
	}
	for i, r := range pipes {
		if r != nil {
			go p.pump(i, r)
		}
	}
	return p.info(), nil
}

// spawnProcess starts req's command, in its own process group, with its output on new pipes
// (or a terminal); the returned readers are stdout's and stderr's (nil for a tty's stderr).
func (a *agent) spawnProcess(id string, req proto.ProcStart) (*process, [2]*os.File, error) {
	var pipes [2]*os.File
	env := withDefaultPath(req.Env)
	if req.TTY != nil && envGet(env, "TERM") == "" {
		env = append(env, "TERM=xterm-256color")
	}
	path, err := lookPath(req.Argv[0], envGet(env, "PATH"))
	if err != nil {
		return nil, pipes, err
	}
	dir := req.Workdir
	if dir == "" {
		dir = "/"
	}
	ring := req.RingBytes
	if ring <= 0 {
		ring = vm.DefaultRingBytes
	}
	p := &process{id: id, argv: req.Argv, reaped: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.out = [2]*outRing{newOutRing(ring), newOutRing(ring)}
	cmd := &exec.Cmd{Path: path, Args: req.Argv, Env: env, Dir: dir}
	var child []*os.File // the child's ends, closed here once it started
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	if req.TTY != nil {
		pipes, child, err = onTerminal(cmd, p, *req.TTY)
	} else {
		pipes, child, err = onPipes(cmd, p, req.Stdin)
	}
	if err != nil {
		return nil, pipes, err
	}
	r := &running{}
	if err := a.startChild(cmd, r); err != nil {
		closeAll(append(pipes[:], p.stdin))
		return nil, [2]*os.File{}, err
	}
	p.pid, p.started = cmd.Process.Pid, time.Now()
	var timer *time.Timer
	if req.TimeoutMS > 0 {
		timer = time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() {
			p.mu.Lock()
			if p.exit == nil {
				p.timedOut = true
				_ = unix.Kill(-p.pid, unix.SIGKILL)
			}
			p.mu.Unlock()
		})
	}
	go a.reapProcess(p, cmd, r, timer)
	return p, pipes, nil
}

// onTerminal gives cmd a new pseudo-terminal of size as its session's controlling terminal:
// the returned stdout reader (and p's input) is its master, and the child's end is returned to
// be closed once cmd started.
func onTerminal(cmd *exec.Cmd, p *process, size proto.TermSize) (pipes [2]*os.File, child []*os.File, err error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return pipes, nil, fmt.Errorf("terminal: %w", err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: size.Rows, Cols: size.Cols}); err != nil {
		ptmx.Close()
		tty.Close()
		return pipes, nil, fmt.Errorf("terminal size: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	p.tty, p.stdin, pipes[0] = ptmx, ptmx, ptmx
	p.out[1].eof = true
	return pipes, []*os.File{tty}, nil
}

// onPipes gives cmd a process group of its own and new pipes for stdout and stderr (and stdin
// when asked, its write end p's input): the returned readers are the host's ends, the child's
// ends are returned to be closed once cmd started.
func onPipes(cmd *exec.Cmd, p *process, stdin bool) (pipes [2]*os.File, child []*os.File, err error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(append(pipes[:], child...))
			return [2]*os.File{}, nil, err
		}
		pipes[i] = r
		child = append(child, w)
		// A pipe of pipeSize lets a fast writer go on while the pump sends, and the pump read
		// more at once; the default (64 KiB) stays when the kernel refuses.
		if rc, err := r.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
		}
	}
	cmd.Stdout, cmd.Stderr = child[0], child[1]
	if stdin {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(append(pipes[:], child...))
			return [2]*os.File{}, nil, err
		}
		child = append(child, r)
		cmd.Stdin, p.stdin = r, w
	}
	return pipes, child, nil
}

// maxRingBytes bounds the ring a process may ask for per stream (the adapter's
// process_ring_bytes allows no more).
const maxRingBytes = 64 << 20

// pipeSize is the capacity asked for a process's output pipes (the kernel's default maximum
// for an unprivileged process, /proc/sys/fs/pipe-max-size).
const pipeSize = 1 << 20

func closeAll(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// reapProcess waits for p's process and records how it ended; the orphan reaper leaves the
// process alone until then (startChild, forgetChild).
func (a *agent) reapProcess(p *process, cmd *exec.Cmd, r *running, timer *time.Timer) {
	_ = cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	a.forgetChild(r)
	ex := &proto.ProcExit{}
	var ws syscall.WaitStatus
	if cmd.ProcessState != nil {
		ws, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	switch {
	case cmd.ProcessState == nil:
		// Its status went elsewhere (it should not: the orphan reaper leaves it alone); the
		// shell's code for a command that could not be waited for stands in.
		fmt.Fprintf(os.Stderr, "guest agent: lost the exit status of process %s\n", p.id)
		ex.ExitCode = intp(255)
	case ws.Signaled():
		ex.Signal = int(ws.Signal())
	default:
		ex.ExitCode = intp(ws.ExitStatus())
	}
	p.mu.Lock()
	ex.TimedOut = p.timedOut
	p.exit = ex
	if p.stdin != nil && p.tty == nil {
		// Nothing reads the pipe any more: an attachment's input now fails instead of filling it.
		p.stdin.Close()
		p.stdin = nil
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	close(p.reaped)
	t := a.procs
	t.mu.Lock()
	t.running--
	t.exited = append(t.exited, p.id)
	for len(t.exited) > vm.MaxGuestProcesses {
		delete(t.procs, t.exited[0])
		t.exited = t.exited[1:]
	}
	t.mu.Unlock()
}

// pump reads stream i's pipe into its ring until the pipe's end (a terminal's master reports
// its end as EIO once the last process holding the terminal is gone).
//
// It reads straight into the ring, asking for little room at first and doubling it up to a
// frame while reads fill it, so a quiet process's ring stays small and a busy one's reads are
// frames.
func (p *process) pump(i int, r *os.File) {
	ring := p.out[i]
	want := minRing
	for {
		p.mu.Lock()
		for !ring.mayRead(p.att != nil) {
			p.cond.Wait()
		}
		space := ring.space(want)
		p.mu.Unlock()
		n, err := r.Read(space)
		if n == len(space) {
			want = min(2*want, pumpBuf)
		}
		p.mu.Lock()
		ring.commit(n)
		if err != nil {
			ring.eof = true
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err != nil {
			// A terminal's master is also its input and what a resize sets: closed under the
			// mutex, so neither uses it afterwards.
			p.mu.Lock()
			if p.stdin == r {
				p.stdin = nil
			}
			r.Close()
			p.mu.Unlock()
			return
		}
	}
}

// attachLocked makes ids p's attachment, detaching the one before, and starts sending; p.mu is
// held. It returns the bytes of each stream lost to the ring since the last byte the host took.
func (a *agent) attachLocked(p *process, ids proto.ProcStreams) (dropped [2]int64) {
	if old := p.att; old != nil {
		a.detachLocked(old, "detached: another attachment took over")
	}
	att := &attachment{p: p, ids: ids, gone: make(chan struct{})}
	if ids.Stdin != 0 {
		att.in = a.openStream(ids.Stdin)
	}
	p.att = att
	for i := range p.out {
		dropped[i] = p.out[i].attach()
	}
	t := a.procs
	t.mu.Lock()
	t.outs[ids.Stdout], t.outs[ids.Stderr] = att, att
	t.mu.Unlock()
	p.cond.Broadcast()
	done := make(chan bool, 2)
	for i := range p.out {
		go a.sendStream(att, i, done)
	}
	go a.finish(att, done)
	if att.in != nil {
		go a.copyStdin(att, p.stdin)
	}
	return dropped
}

// detachLocked ends att without an exit notice; p.mu is held.
func (a *agent) detachLocked(att *attachment, reason string) {
	p := att.p
	if p.att != att {
		return
	}
	p.att = nil
	close(att.gone)
	p.cond.Broadcast()
	a.forgetAttachment(att)
	a.send(proto.EndFrame(att.ids.Stdout, reason))
	a.send(proto.EndFrame(att.ids.Stderr, reason))
	if att.in != nil {
		att.in.Stop()
		a.send(proto.EndFrame(att.ids.Stdin, reason))
	}
}

func (a *agent) forgetAttachment(att *attachment) {
	t := a.procs
	t.mu.Lock()
	delete(t.outs, att.ids.Stdout)
	delete(t.outs, att.ids.Stderr)
	t.mu.Unlock()
	if att.in != nil {
		a.closeStream(att.ids.Stdin)
	}
}

// sendStream sends stream i of att's process as the ring fills and the host credits it, and
// reports on done whether it sent the stream's last byte (false: att was detached).
func (a *agent) sendStream(att *attachment, i int, done chan<- bool) {
	p := att.p
	ring := p.out[i]
	id := att.ids.Stdout
	if i == 1 {
		id = att.ids.Stderr
	}
	var buf []byte
	p.mu.Lock()
	for {
		if p.att != att {
			p.mu.Unlock()
			done <- false
			return
		}
		if n := ring.sendable(); n > 0 {
			if len(buf) < n {
				// Grown to the frames sent, so that a quiet stream holds little.
				buf = make([]byte, min(max(n, 2*len(buf)), proto.StreamChunk))
			}
			k := ring.read(ring.sent, buf[:n])
			ring.sentFrame(k)
			p.mu.Unlock()
			a.send(proto.Frame{Type: proto.TypeData, ID: id, Payload: buf[:k]})
			p.mu.Lock()
			continue
		}
		if ring.done() {
			p.mu.Unlock()
			done <- true
			return
		}
		p.cond.Wait()
	}
}

// finish ends att once both streams are sent whole and the process was reaped: the exit notice
// on stdout, then an End on each stream.
func (a *agent) finish(att *attachment, done <-chan bool) {
	if !<-done || !<-done {
		return
	}
	p := att.p
	select {
	case <-p.reaped:
	case <-att.gone:
		return
	}
	p.mu.Lock()
	if p.att != att {
		p.mu.Unlock()
		return
	}
	p.att = nil
	close(att.gone)
	ex := *p.exit
	p.cond.Broadcast()
	p.mu.Unlock()
	a.forgetAttachment(att)
	a.sendJSON(proto.TypeProcExit, att.ids.Stdout, ex)
	a.send(proto.EndFrame(att.ids.Stdout, ""))
	a.send(proto.EndFrame(att.ids.Stderr, ""))
	if att.in != nil {
		att.in.Stop()
		a.send(proto.EndFrame(att.ids.Stdin, "the process has exited"))
	}
}

// copyStdin writes the host's input into the process; the host's complete End is end of file:
// the pipe is closed, or a terminal gets its EOF character.
func (a *agent) copyStdin(att *attachment, w *os.File) {
	r := a.newHostReader(att.ids.Stdin, att.in)
	for {
		b, err := r.Chunk()
		if err == io.EOF {
			p := att.p
			p.mu.Lock()
			if p.tty != nil && p.stdin == w {
				_, _ = w.Write([]byte{4})
			} else if p.stdin == w {
				p.stdin = nil
				w.Close()
			}
			p.mu.Unlock()
			return
		}
		if err != nil {
			return
		}
		if _, err := w.Write(b); err != nil {
			a.send(proto.EndFrame(att.ids.Stdin, "the process's input is closed: "+err.Error()))
			return
		}
	}
}

// deliverProc routes a host frame of an attachment's output stream: a Credit reopens its
// window, an End (the host's reader went away) detaches it. It reports whether id was one.
func (a *agent) deliverProc(f proto.Frame) bool {
	t := a.procs
	t.mu.Lock()
	att := t.outs[f.ID]
	t.mu.Unlock()
	if att == nil {
		return false
	}
	p := att.p
	p.mu.Lock()
	defer p.mu.Unlock()
	switch f.Type {
	case proto.TypeCredit:
		ring := p.out[0]
		if f.ID == att.ids.Stderr {
			ring = p.out[1]
		}
		n, err := proto.ParseCredit(f.Payload)
		if err == nil {
			err = ring.credit(n)
		}
		if err != nil {
			a.detachLocked(att, "protocol: "+err.Error())
			return true
		}
		ring.settle()
		p.cond.Broadcast()
	case proto.TypeEnd:
		a.detachLocked(att, "detached by the host")
	}
	return true
}

// procAttach attaches the host's streams to a process.
func (a *agent) procAttach(req proto.ProcAttach) (proto.ProcAttached, *proto.Error) {
	p, e := a.lookupProc(req.ID)
	if e != nil {
		return proto.ProcAttached{}, e
	}
	p.mu.Lock()
	if req.Streams.Stdin != 0 && p.stdin == nil {
		p.mu.Unlock()
		return proto.ProcAttached{}, procErr(vm.ProcessNoStdin, "process %s: its standard input is closed or was never open (start it with stdin)", p.id)
	}
	d := a.attachLocked(p, req.Streams)
	p.mu.Unlock()
	return proto.ProcAttached{Process: p.info(), DroppedStdout: d[0], DroppedStderr: d[1]}, nil
}

// info describes p.
func (p *process) info() proto.ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := proto.ProcInfo{ID: p.id, PID: p.pid, Argv: p.argv, TTY: p.tty != nil, StartedAtMS: p.started.UnixMilli(), Attached: p.att != nil}
	if p.exit != nil {
		ex := *p.exit
		in.Exit = &ex
	}
	return in
}

// procList lists the processes in the order they started.
func (a *agent) procList() proto.ProcListed {
	t := a.procs
	t.mu.Lock()
	ps := make([]*process, 0, len(t.procs))
	for _, p := range t.procs {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	out := proto.ProcListed{Processes: make([]proto.ProcInfo, 0, len(ps))}
	for _, p := range ps {
		out.Processes = append(out.Processes, p.info())
	}
	// An id's number is the process's place in the start order.
	num := func(id string) int { n, _ := strconv.Atoi(id[1:]); return n }
	slices.SortFunc(out.Processes, func(x, y proto.ProcInfo) int { return num(x.ID) - num(y.ID) })
	return out
}

func (a *agent) procSignal(req proto.ProcSignal) *proto.Error {
	p, e := a.lookupProc(req.ID)
	if e != nil {
		return e
	}
	if req.Signal < 1 || req.Signal > 64 {
		return &proto.Error{Message: fmt.Sprintf("process %s: signal %d is not 1..64", p.id, req.Signal)}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit != nil {
		return procErr(vm.ProcessExited, "process %s has exited", p.id)
	}
	if err := unix.Kill(-p.pid, unix.Signal(req.Signal)); err != nil {
		return &proto.Error{Message: fmt.Sprintf("process %s: signal %d: %v", p.id, req.Signal, err)}
	}
	return nil
}

func (a *agent) procResize(req proto.ProcResize) *proto.Error {
	p, e := a.lookupProc(req.ID)
	if e != nil {
		return e
	}
	if p.tty == nil {
		return procErr(vm.ProcessNoTTY, "process %s has no terminal", p.id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin != p.tty {
		return procErr(vm.ProcessExited, "process %s has exited", p.id)
	}
	if err := pty.Setsize(p.tty, &pty.Winsize{Rows: req.Size.Rows, Cols: req.Size.Cols}); err != nil {
		return &proto.Error{Message: fmt.Sprintf("process %s: resize: %v", p.id, err)}
	}
	return nil
}

// killProcs kills the process group of every running process (the machine shuts down).
func (a *agent) killProcs() {
	t := a.procs
	t.mu.Lock()
	ps := make([]*process, 0, len(t.procs))
	for _, p := range t.procs {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	for _, p := range ps {
		p.mu.Lock()
		if p.exit == nil && p.pid > 0 {
			_ = unix.Kill(-p.pid, unix.SIGKILL)
		}
		p.mu.Unlock()
	}
}
