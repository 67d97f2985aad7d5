package qemu

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iii-go/iii/internal/base/excerpt"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// randRead fills b with the host's randomness.
var randRead = rand.Read

// ErrStopped is returned by calls on a machine that has exited.
var ErrStopped = errors.New("vm: machine has exited")

type machine struct {
	spec    vm.Spec
	release string
	agent   string    // the guest agent's version (Hello, or a restored machine's Resume reply)
	times   BootTimes // its Guest is the agent's Hello

	qemu     *proc
	vfsd     []*proc
	console  string        // console log path
	sockDir  string        // holds the sockets: StateDir, or a short temporary path
	qmpSock  string        // qemu's monitor socket, for machines that are snapshotted or restored
	incoming bool          // qemu starts waiting for a snapshot (Restore) instead of booting
	snapFile *os.File      // the snapshot a restore loads, handed to qemu as its fd 3
	ram      string        // the snapshot's RAM file, mapped shared when saving, private when restored
	restored *RestoreTimes // set for a machine Restore started
	keepRAM  bool          // map ram shared although incoming: Save's helper writes a new snapshot's RAM
	tempDirs []string      // directories the driver created, removed on exit

	conn net.Conn
	wmu  sync.Mutex

	nextID  atomic.Uint32
	mu      sync.Mutex // guards pending and deadline
	pending map[uint32]*call
	helloCh chan proto.Hello
	connErr chan struct{} // closed when the control channel breaks

	stopOnce sync.Once
	done     chan struct{}
	deadline *time.Timer
}

// call is a request waiting for its answer; out receives streamed output of an exec. A streamed
// fs op or a process attachment's stream has a *proto.Stream instead of reply (see fsstream.go,
// process.go); exit takes the exit notice of a process on its attachment's stdout stream.
type call struct {
	reply  chan proto.Frame
	out    func(stream int, data []byte)
	stream *proto.Stream
	exit   func(payload []byte)
	conn   *proto.ConnEnd // a connection to a guest port (dial.go): its Reply goes to reply, the rest to it
}

// boot checks spec, makes the machine's directories, starts virtiofsd and qemu and waits for
// the guest agent. Each step registers what it started on m, so a failure ends all of it.
func (d *Driver) boot(ctx context.Context, spec vm.Spec) (vm.Machine, error) {
	spec, err := checkSpec(spec)
	if err != nil {
		return nil, err
	}
	ownState, err := prepareStateDir(&spec)
	if err != nil {
		return nil, err
	}
	accel := d.Accel()
	ctx, cancel := context.WithTimeout(ctx, d.opt.BootTimeout)
	defer cancel()

	m, err := newMachine(spec, ownState)
	if err != nil {
		return nil, err
	}
	if err := d.start(ctx, m, accel); err != nil {
		return nil, m.bootFailed(err)
	}
	return m, nil
}

// checkSpec fills in the defaults of spec and refuses one that cannot boot.
func checkSpec(spec vm.Spec) (vm.Spec, error) {
	if spec.CPUs < 1 {
		spec.CPUs = 1
	}
	if spec.MemoryMB < 128 {
		return spec, bootError(fmt.Errorf("memory_mb %d is below the 128 MiB minimum", spec.MemoryMB))
	}
	if spec.ScratchMB <= 0 {
		// tmpfs pages live in guest RAM: by default writes may use half of it.
		spec.ScratchMB = spec.MemoryMB / 2
	}
	if spec.RootDisk != "" {
		if len(spec.Mounts) > 0 {
			return spec, bootError(errors.New("a machine whose root is a disk image takes no mounts"))
		}
		if st, err := os.Stat(spec.RootDisk); err != nil || !st.Mode().IsRegular() {
			return spec, bootError(fmt.Errorf("root disk %q is not a file", spec.RootDisk))
		}
	} else if st, err := os.Stat(spec.RootFS); err != nil || !st.IsDir() {
		return spec, bootError(fmt.Errorf("root filesystem %q is not a directory", spec.RootFS))
	}
	for _, mt := range spec.Mounts {
		if st, err := os.Stat(mt.Host); err != nil || !st.IsDir() {
			return spec, bootError(fmt.Errorf("mount source %q is not a directory", mt.Host))
		}
	}
	for _, a := range spec.HostAccess {
		if !spec.Network || !a.Addr().Unmap().IsLoopback() || a.Port() == 0 {
			return spec, bootError(fmt.Errorf("host access %s: only a loopback address and port of the host, for a machine with networking", a))
		}
	}
	if len(spec.Egress) > 0 && !spec.Network {
		return spec, bootError(errors.New("an egress policy is for a machine with networking"))
	}
	if spec.Disk != "" {
		if st, err := os.Stat(spec.Disk); err != nil || !st.Mode().IsRegular() {
			return spec, bootError(fmt.Errorf("state disk %q is not a file", spec.Disk))
		}
	}
	return spec, nil
}

// prepareStateDir creates spec.StateDir, a temporary one when it is empty (ownState).
func prepareStateDir(spec *vm.Spec) (ownState bool, err error) {
	ownState = spec.StateDir == ""
	if ownState {
		dir, err := os.MkdirTemp("", "iii-vm-")
		if err != nil {
			return false, err
		}
		spec.StateDir = dir
	}
	return ownState, os.MkdirAll(spec.StateDir, 0o700)
}

// newMachine is the machine of spec before any process starts; a temporary state directory
// (ownState) is removed when it ends.
func newMachine(spec vm.Spec, ownState bool) (*machine, error) {
	m := &machine{
		times:   BootTimes{Start: time.Now()},
		spec:    spec,
		pending: map[uint32]*call{},
		helloCh: make(chan proto.Hello, 1),
		connErr: make(chan struct{}),
		done:    make(chan struct{}),
		console: filepath.Join(spec.StateDir, "console.log"),
		sockDir: spec.StateDir,
	}
	if ownState {
		m.tempDirs = append(m.tempDirs, spec.StateDir)
	}
	// Unix socket paths are limited to 108 bytes; long state dirs get their sockets elsewhere.
	if len(spec.StateDir) > 80 {
		dir, err := os.MkdirTemp("", "iii-vm-")
		if err != nil {
			return nil, err
		}
		m.sockDir = dir
		m.tempDirs = append(m.tempDirs, dir)
	}
	return m, nil
}

// bootFailed ends everything the boot started and says why it failed, with the console's tail.
func (m *machine) bootFailed(err error) error {
	m.killProcs() // first, so the console holds everything they wrote
	tail := m.consoleTail()
	m.kill()
	return &vm.BootError{Detail: err.Error() + tail, Err: err}
}

// start runs the processes of m, waits until its agent is ready and arms its deadline.
func (d *Driver) start(ctx context.Context, m *machine, accel string) error {
	log, err := os.Create(m.console)
	if err != nil {
		return err
	}
	defer log.Close()
	socks, err := d.startVirtiofsd(ctx, m, log)
	if err != nil {
		return err
	}
	m.times.SharesReady = time.Now()
	if err := d.startQemu(ctx, m, accel, socks, log); err != nil {
		return err
	}
	if err := d.handshake(ctx, m); err != nil {
		return err
	}
	m.times.Ready = time.Now()
	if m.spec.Deadline > 0 {
		t := time.AfterFunc(m.spec.Deadline, m.kill)
		m.mu.Lock()
		m.deadline = t
		m.mu.Unlock()
	}
	return nil
}

// startVirtiofsd serves the image root and the mounts, one virtiofsd each, and returns their
// sockets once they all exist. Under 9p qemu serves them itself and none is started.
func (d *Driver) startVirtiofsd(ctx context.Context, m *machine, log *os.File) ([]string, error) {
	if d.opt.Share == Share9P || m.spec.RootDisk != "" {
		return nil, nil
	}
	shares := append([]vm.Mount{{Host: m.spec.RootFS, ReadOnly: true}}, m.spec.Mounts...)
	var socks []string
	for i, sh := range shares {
		sock := filepath.Join(m.sockDir, fmt.Sprintf("vfs%d.sock", i))
		_ = os.Remove(sock)
		p, err := startProc("virtiofsd", virtiofsdArgv(d.opt.Virtiofsd, sh.Host, sock, sh.ReadOnly), log, false, nil)
		if err != nil {
			return nil, fmt.Errorf("start virtiofsd: %w", err)
		}
		m.vfsd = append(m.vfsd, p)
		socks = append(socks, sock)
	}
	for i, sock := range socks {
		if err := waitPath(ctx, sock, m.vfsd[i]); err != nil {
			return nil, fmt.Errorf("virtiofsd for %s: %w", shares[i].Host, err)
		}
	}
	return socks, nil
}

// startQemu starts qemu on the shares' sockets and connects to the agent's control port.
func (d *Driver) startQemu(ctx context.Context, m *machine, accel string, socks []string, log *os.File) error {
	ctrl := filepath.Join(m.sockDir, "ctrl.sock")
	_ = os.Remove(ctrl)
	argv := append([]string{d.opt.Qemu}, d.qemuArgs(qemuConfig{spec: m.spec, accel: accel, vfsSocks: socks, ctrlSock: ctrl,
		qmpSock: m.qmpSock, incoming: m.incoming, ram: m.ram, ramShared: m.ram != "" && (!m.incoming || m.keepRAM)})...)
	var err error
	// A restore's RAM is filled by qemu's migration load, which huge pages would make resident in
	// full (startWithoutHugePages); a boot's is filled by its guest alone.
	if m.spec.Network {
		// A networked guest must not reach the host's loopback through slirp (netPolicy).
		m.qemu, err = startNetProc("qemu", argv, log, newNetPolicy(m.spec))
	} else {
		m.qemu, err = startProc("qemu", argv, log, m.incoming, m.snapFile)
	}
	if err != nil {
		return fmt.Errorf("start qemu: %w", err)
	}
	m.times.QemuStarted = time.Now()
	conn, err := dialCtrl(ctx, ctrl, m.qemu)
	if err != nil {
		return err
	}
	m.conn = conn
	go m.reap()
	go m.readLoop()
	return nil
}

// handshake sends Init, waits for the agent's Hello, then for Init's reply.
//
// Init goes out at once: the port holds it until the agent opens the port and reads it after
// its Hello, so the guest never waits for the host between the two. A Hello of another agent
// version still fails the boot.
func (d *Driver) handshake(ctx context.Context, m *machine) error {
	init, err := d.initFor(m.spec)
	if err != nil {
		return err
	}
	initID, initCall := m.register(nil)
	defer m.forget(initID)
	if f, err := proto.Marshal(proto.TypeInit, initID, init); err != nil {
		return err
	} else if err := m.send(f); err != nil {
		return fmt.Errorf("root setup: %w", err)
	}
	if err := d.awaitHello(ctx, m); err != nil {
		return err
	}
	if _, err := m.await(ctx, initCall); err != nil {
		return fmt.Errorf("root setup: %w", err)
	}
	return nil
}

// initFor is the Init message of spec: the root and mounts to set up and fresh entropy.
func (d *Driver) initFor(spec vm.Spec) (proto.Init, error) {
	init := proto.Init{RootTag: "root", ScratchMB: spec.ScratchMB, StateDisk: spec.Disk != "", Network: spec.Network, Entropy: make([]byte, 64), Hostname: spec.Hostname}
	switch {
	case spec.RootDisk != "":
		init.Share = proto.ShareBlock
	case d.opt.Share == Share9P:
		init.Share = proto.Share9P
	}
	if _, err := randRead(init.Entropy); err != nil {
		return init, fmt.Errorf("entropy for the guest: %w", err)
	}
	for i, mt := range spec.Mounts {
		init.Mounts = append(init.Mounts, proto.GuestMount{Tag: tagFor(i + 1), Path: mt.Guest, ReadOnly: mt.ReadOnly})
	}
	return init, nil
}

// awaitHello waits for the agent's Hello and checks that it speaks this adapter's version.
func (d *Driver) awaitHello(ctx context.Context, m *machine) error {
	select {
	case h := <-m.helloCh:
		if h.Agent != proto.AgentVersion {
			return fmt.Errorf("the firmware's guest agent is %q, this adapter speaks %q: rebuild the firmware with `go tool mage firmware`", h.Agent, proto.AgentVersion)
		}
		m.release, m.agent = h.KernelRelease, h.Agent
		m.times.Hello, m.times.Guest = time.Now(), h
		return nil
	case <-m.connErr:
		// Let qemu finish writing the console (a panicking kernel) before it is read; a loaded
		// host can take seconds.
		m.qemu.waitFor(3 * time.Second)
		return errors.New("the guest closed its control channel before the agent started")
	case <-ctx.Done():
		return fmt.Errorf("the guest agent did not start within %s", d.opt.BootTimeout)
	}
}

// virtiofsdArgv serves dir on sock. A read-only share runs virtiofsd in a private mount namespace
// where dir is a read-only bind mount, so the host refuses writes whatever the guest kernel does.
func virtiofsdArgv(virtiofsd, dir, sock string, readOnly bool) []string {
	serve := []string{virtiofsd, "--socket-path=" + sock, "-o", "source=" + dir, "-o", "cache=always", "-o", "sandbox=chroot"}
	if !readOnly {
		return serve
	}
	script := `mount --bind -- "$1" "$1" && mount -o remount,bind,ro -- "$1" && shift 2 && exec "$@"`
	return append([]string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", dir, "--"}, serve...)
}

func waitPath(ctx context.Context, path string, p *proc) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("exited before creating its socket (%w)", p.err)
		}
		if err := pollWait(ctx); err != nil {
			return errors.New("socket did not appear in time")
		}
	}
}

func dialCtrl(ctx context.Context, path string, qemu *proc) (net.Conn, error) {
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return c, nil
		}
		if qemu.exited() {
			return nil, fmt.Errorf("qemu exited during start (%w)", qemu.err)
		}
		if err := pollWait(ctx); err != nil {
			return nil, fmt.Errorf("control socket did not open: %w", err)
		}
	}
}

func pollWait(ctx context.Context) error {
	t := time.NewTimer(3 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reap waits for qemu to exit, then ends the rest of the machine.
func (m *machine) reap() {
	<-m.qemu.done
	m.kill()
}

// kill ends every process of the machine by PID and releases its resources; idempotent.
func (m *machine) kill() {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		t := m.deadline
		m.mu.Unlock()
		if t != nil {
			t.Stop()
		}
		m.killProcs()
		if m.conn != nil {
			m.conn.Close()
		}
		matches, _ := filepath.Glob(filepath.Join(m.sockDir, "*.sock"))
		for _, s := range matches {
			os.Remove(s)
		}
		for _, d := range m.tempDirs {
			os.RemoveAll(d)
		}
		close(m.done)
	})
}

// killProcs kills qemu and every virtiofsd by PID and waits until they are reaped.
func (m *machine) killProcs() {
	if m.qemu != nil {
		m.qemu.kill()
	}
	for _, p := range m.vfsd {
		p.kill()
	}
}

func (m *machine) consoleTail() string {
	b, err := os.ReadFile(m.console)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return ""
	}
	return "\n--- VM console (last lines) ---\n" + excerpt.Tail(string(b), 32, 4096)
}

func (m *machine) readLoop() {
	defer close(m.connErr)
	r := bufio.NewReaderSize(m.conn, proto.ReadBuffer)
	for {
		f, err := proto.Read(r)
		if err != nil {
			return
		}
		switch f.Type {
		case proto.TypeHello:
			var h proto.Hello
			_ = json.Unmarshal(f.Payload, &h)
			select {
			case m.helloCh <- h:
			default:
			}
		case proto.TypeOutput:
			m.mu.Lock()
			c := m.pending[f.ID]
			m.mu.Unlock()
			if c != nil && c.out != nil {
				var o proto.Output
				if json.Unmarshal(f.Payload, &o) == nil {
					c.out(o.Stream, o.Data)
				}
			}
		case proto.TypeProcExit:
			m.mu.Lock()
			c := m.pending[f.ID]
			m.mu.Unlock()
			if c != nil && c.exit != nil {
				c.exit(f.Payload)
			}
		case proto.TypeReply, proto.TypeExecDone, proto.TypeData, proto.TypeEnd, proto.TypeCredit:
			m.mu.Lock()
			c := m.pending[f.ID]
			final := c != nil && c.stream == nil && c.conn == nil && (f.Type == proto.TypeReply || f.Type == proto.TypeExecDone)
			if final {
				delete(m.pending, f.ID)
			}
			m.mu.Unlock()
			switch {
			case c != nil && c.conn != nil && f.Type == proto.TypeReply:
				select {
				case c.reply <- f:
				default:
				}
			case c != nil && c.conn != nil:
				c.conn.Deliver(f)
			case c != nil && c.stream != nil:
				c.stream.Deliver(f)
			case final:
				c.reply <- f
			}
		}
	}
}

func (m *machine) send(f proto.Frame) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	return proto.Write(m.conn, f)
}

func (m *machine) register(out func(int, []byte)) (uint32, *call) {
	id := m.nextID.Add(1)
	c := &call{reply: make(chan proto.Frame, 1), out: out}
	m.mu.Lock()
	m.pending[id] = c
	m.mu.Unlock()
	return id, c
}

func (m *machine) forget(id uint32) {
	m.mu.Lock()
	delete(m.pending, id)
	m.mu.Unlock()
}

// request sends a frame that is answered by a Reply and returns the reply's result.
func (m *machine) request(ctx context.Context, t proto.Type, v any) (json.RawMessage, error) {
	id, c := m.register(nil)
	defer m.forget(id)
	f, err := proto.Marshal(t, id, v)
	if err != nil {
		return nil, err
	}
	if err := m.send(f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return m.await(ctx, c)
}

// await waits for the Reply of call c and returns its result.
func (m *machine) await(ctx context.Context, c *call) (json.RawMessage, error) {
	select {
	case f := <-c.reply:
		return decodeReply(f.Payload)
	case <-m.connErr:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

var _ vm.Prestarter = (*machine)(nil)

// Prestart starts the interpreter argv0 in the guest, waiting to be forked by the next exec of a
// script with it (vm.Prestarter).
func (m *machine) Prestart(ctx context.Context, argv0 string) error {
	_, err := m.request(ctx, proto.TypePrestart, proto.Prestart{Argv0: argv0})
	return err
}

// Exec runs one command in the guest.
func (m *machine) Exec(ctx context.Context, req vm.ExecRequest) (vm.ExecResult, error) {
	if len(req.Argv) == 0 {
		return vm.ExecResult{}, errors.New("vm: empty argv")
	}
	ex := proto.Exec{
		Argv:      req.Argv,
		Env:       append(append([]string(nil), m.spec.Env...), req.Env...),
		Stdin:     req.Stdin,
		Workdir:   req.Workdir,
		TimeoutMS: req.Timeout.Milliseconds(),
		OutputCap: req.OutputCap,
		Stream:    req.Output != nil,
	}
	if req.Timeout > 0 && ex.TimeoutMS == 0 {
		ex.TimeoutMS = 1
	}
	if ex.Workdir == "" {
		ex.Workdir = m.spec.Workdir
	}
	if ex.Workdir == "" {
		ex.Workdir = "/"
	}
	id, c := m.register(req.Output)
	defer m.forget(id)
	f, err := proto.Marshal(proto.TypeExec, id, ex)
	if err != nil {
		return vm.ExecResult{}, err
	}
	start := time.Now()
	if err := m.send(f); err != nil {
		return vm.ExecResult{}, fmt.Errorf("%w: %w", ErrStopped, err)
	}
	// The guest enforces the timeout; the host waits a grace period beyond it before giving up.
	var guard <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout + 10*time.Second)
		defer t.Stop()
		guard = t.C
	}
	select {
	case f := <-c.reply:
		var d proto.ExecDone
		if err := json.Unmarshal(f.Payload, &d); err != nil {
			return vm.ExecResult{}, err
		}
		return vm.ExecResult{
			Stdout: d.Stdout, Stderr: d.Stderr,
			StdoutTruncated: d.StdoutTruncated, StderrTruncated: d.StderrTruncated,
			ExitCode: d.ExitCode, Signal: d.Signal, TimedOut: d.TimedOut, Duration: time.Since(start),
		}, nil
	case <-m.connErr:
		return vm.ExecResult{}, ErrStopped
	case <-guard:
		m.signal(id, syscall.SIGKILL)
		return vm.ExecResult{TimedOut: true, Duration: time.Since(start)}, fmt.Errorf("vm: the guest did not end the command %s after its timeout", 10*time.Second)
	case <-ctx.Done():
		m.signal(id, syscall.SIGKILL)
		return vm.ExecResult{}, ctx.Err()
	}
}

func (m *machine) signal(id uint32, sig syscall.Signal) {
	if f, err := proto.Marshal(proto.TypeKill, id, proto.Kill{Signal: int(sig)}); err == nil {
		_ = m.send(f)
	}
}

// FS runs one fs::* operation in the guest.
func (m *machine) FS(ctx context.Context, op string, req json.RawMessage) (json.RawMessage, error) {
	if len(req) == 0 {
		req = json.RawMessage("{}")
	}
	return m.request(ctx, proto.TypeFS, proto.FS{Op: op, Request: req})
}

// KernelRelease is the guest's `uname -r`.
func (m *machine) KernelRelease() string { return m.release }

// PIDs lists the host processes of the machine that have not exited.
func (m *machine) PIDs() []int {
	var pids []int
	for _, p := range append([]*proc{m.qemu}, m.vfsd...) {
		if p != nil && !p.exited() {
			pids = append(pids, p.pid())
		}
	}
	return pids
}

// Stop asks the guest to power off, waits briefly, then kills every process by PID.
func (m *machine) Stop(ctx context.Context) error {
	select {
	case <-m.done:
		return nil
	default:
	}
	if f, err := proto.Marshal(proto.TypeShutdown, 0, struct{}{}); err == nil && m.conn != nil {
		_ = m.send(f)
	}
	grace := 200 * time.Millisecond
	if m.spec.Disk != "" {
		// The agent syncs before it powers off: a state disk keeps the guest's last writes only
		// if qemu exits on its own, which under TCG takes longer than a throwaway VM may.
		grace = stateDiskGrace
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < grace {
		grace = max(time.Until(dl), 0)
	}
	m.qemu.waitFor(grace)
	m.kill()
	return nil
}

// stateDiskGrace bounds how long Stop waits for a machine with a state disk to power off.
const stateDiskGrace = 10 * time.Second

// Done is closed once every process of the machine has exited.
func (m *machine) Done() <-chan struct{} { return m.done }

// BootInfo reports what the guest agent said about its boot: uptime when its control port
// opened and time spent loading kernel modules.
func (m *machine) BootInfo() proto.Hello { return m.times.Guest }

// bootError is a failed boot found before any process started.
func bootError(err error) error { return &vm.BootError{Detail: err.Error(), Err: err} }

// decodeReply decodes a Reply payload into its result, or its error: an *vm.FSError when the
// guest gave a code.
func decodeReply(payload []byte) (json.RawMessage, error) {
	var r proto.Reply
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, err
	}
	if r.Error != nil {
		if r.Error.Code != "" {
			return nil, &vm.FSError{Code: r.Error.Code, Message: r.Error.Message, Fix: r.Error.Fix}
		}
		return nil, errors.New(r.Error.Message)
	}
	return r.Result, nil
}
