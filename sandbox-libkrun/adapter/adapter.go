// Package adapter implements the sandbox API (the sandbox::* functions): each operation is a plain
// handler that takes the JSON request and returns the JSON-ready reply or an S-code error, with
// the fields and codes of the 0.25 daemon (req A4). VMs come from a vm.Driver and root
// filesystems from an Images resolver, so the package runs against fakes. The stream channels of
// fs::read and fs::write, and of the process operations of contract 1.2 (process::*, see
// process.go), come from Options.Channels, the engine connection (see fs.go).
package adapter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/excerpt"
	"github.com/iii-go/iii/sandbox-libkrun/catalog"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Name is the adapter's name in adapter::info.
const Name = scode.AdapterName

// Contract is the sandbox contract version this adapter implements.
var Contract = ContractVersion{Major: scode.ContractMajor, Minor: scode.ContractMinor}

// ContractVersion is {major, minor}.
type ContractVersion struct {
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// OutputCap is the number of bytes of each stream an exec reply keeps (1 MiB).
const OutputCap = 1 << 20

// DefaultExecTimeout applies when a request has no timeout_ms.
const DefaultExecTimeout = 300000 * time.Millisecond

// ReapInterval is how often the idle reaper runs.
const ReapInterval = 10 * time.Second

// busyGrace is added to idle timeout and max exec timeout before a busy sandbox is reclaimed.
const busyGrace = 60 * time.Second

// stopTimeout bounds one machine stop.
const stopTimeout = 15 * time.Second

// bootErrorTail bounds the console tail an S300 message carries.
const bootErrorTail = 4096

// stoppedRetention is how long a stopped sandbox stays listed (and answers S004).
const stoppedRetention = time.Hour

// ErrNotCached is returned (wrapped) by an Images resolver when the image is not cached and it
// was asked not to pull it.
var ErrNotCached = errors.New("image not cached")

// Images turns a catalog image into a root filesystem directory on the host, pulling it into the
// cache when autoInstall is set. A miss without autoInstall returns ErrNotCached; any other error
// is a pull failure.
type Images interface {
	Resolve(ctx context.Context, name, ociRef string, autoInstall bool) (rootfsDir string, err error)
}

// Options configure a Service.
type Options struct {
	Settings settings.Settings
	Driver   vm.Driver
	Images   Images
	Version  string // adapter_version
	// Accelerator is the accelerator VMs run under (kvm, tcg, hvf), reported by adapter::info.
	Accelerator string
	// GuestArch is the guest architecture (uname -m in a sandbox), reported by adapter::info.
	GuestArch string
	StateDir  string           // parent of each sandbox's machine state directory (sockets, console)
	Now       func() time.Time // clock; time.Now when nil
	Logf      func(format string, args ...any)
	Channels  Channels // engine stream channels of fs::read and fs::write; without, channel content is S218
	// Snapshots, when set (and the Driver is a vm.Snapshotter), is where cold sandboxes without
	// networking are restored from; FirmwareID identifies the firmware in their keys.
	Snapshots  *snapshot.Store
	FirmwareID string
	// UserSnapshotDir holds the snapshots of running sandboxes (sandbox::snapshot); empty:
	// user-snapshots beside Snapshots' directory, else under StateDir.
	UserSnapshotDir string
}

// Service holds the live sandboxes and serves every operation.
type Service struct {
	opt     Options
	cat     *catalog.Catalog
	mu      sync.Mutex
	boxes   map[string]*sandbox
	booting int
	stops   sync.WaitGroup
	pool    *pool      // nil without warm_pool
	snaps   *snapshots // nil with snapshots off
	users   *userSnaps // the snapshots of running sandboxes

	streamCtx  context.Context // parent of fs::read streams; cancelled by Shutdown
	stopStream context.CancelFunc
	streams    sync.WaitGroup
}

type sandbox struct {
	id, name, image string
	created         time.Time
	lastActive      time.Time
	idle            time.Duration
	machine         vm.Machine
	env             []string // create's env, layered under each exec's (pooled machines boot without)
	stateDir        string
	fromSnapshot    bool
	inflight        uint32
	stopped         bool
	stoppedAt       time.Time
	stopDone        chan struct{}
	saveMu          sync.Mutex    // one save, pause or resume of the machine at a time
	paused          *userSnapMeta // set while paused: the saved machine in pauseDir
	pauseDir        string
	pausing         bool                   // a pause is saving the machine: calls wait for it, then resume
	autoPausing     bool                   // the reaper has started pausing it for idleness
	pauses          int                    // pauses so far, naming each one's directory
	procMu          sync.Mutex             // serialises process starts, so that max_processes holds
	atts            map[string]*procAttach // the live attachment of each attached process, by process id
	pending         map[string]pending     // output a departed reader did not take, by process id
	exposed         map[int]*exposure      // the exposed ports, by guest port; guarded by Service.mu
	network         string                 // "on" or "policy" (networkMode); "": off
}

// New builds a Service.
func New(opt Options) *Service {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logf == nil {
		opt.Logf = func(string, ...any) {}
	}
	if opt.StateDir == "" {
		opt.StateDir = filepath.Join(os.TempDir(), fmt.Sprintf("iii-sbx-%d", os.Getuid()))
	}
	s := &Service{opt: opt, cat: catalog.New(opt.Settings), boxes: map[string]*sandbox{},
		users: &userSnaps{dir: userSnapDir(opt), limitMB: opt.Settings.UserSnapshotsMB}}
	s.streamCtx, s.stopStream = context.WithCancel(context.Background())
	// The snapshot store first: the pool's refills, which newPool starts, restore from it.
	if opt.Settings.Snapshots == settings.SnapshotsOn {
		s.snaps = newSnapshots(opt)
	}
	if len(opt.Settings.WarmPool) > 0 {
		s.pool = newPool(s, opt.Settings.WarmPool)
	}
	return s
}

// Handler is one operation: JSON request in, JSON-ready reply or error out. Errors are
// *scode.Error.
type Handler func(ctx context.Context, req json.RawMessage) (any, error)

// FSOps are the ten filesystem operations, without prefix.
var FSOps = []string{"ls", "stat", "mkdir", "write", "read", "rm", "chmod", "mv", "grep", "sed"}

// Handlers maps each operation name (without the adapter prefix) to its handler.
func (s *Service) Handlers() map[string]Handler {
	h := map[string]Handler{
		"create":        s.Create,
		"exec":          s.Exec,
		"run":           s.Run,
		"list":          s.List,
		"stop":          s.Stop,
		"catalog::list": s.CatalogList,
		"adapter::info": s.Info,
		// Contract 1.3: snapshots of running sandboxes (usersnap.go).
		"snapshot":         s.Snapshot,
		"snapshot::list":   s.SnapshotList,
		"snapshot::delete": s.SnapshotDelete,
		"fork":             s.Fork,
		"pause":            s.Pause,
		"resume":           s.Resume,
	}
	for _, op := range FSOps {
		h["fs::"+op] = s.fsHandler(op)
	}
	s.processHandlers(h)
	s.exposeHandlers(h)
	return h
}

// InfoReply is the adapter::info reply; warm_pool appears only when one is configured.
type InfoReply struct {
	Adapter        string                `json:"adapter"`
	AdapterVersion string                `json:"adapter_version"`
	Contract       ContractVersion       `json:"contract"`
	Driver         string                `json:"driver"`
	Accelerator    string                `json:"accelerator"`
	GuestArch      string                `json:"guest_arch,omitempty"`
	FileShare      string                `json:"file_share,omitempty"`
	WarmPool       map[string]PoolStatus `json:"warm_pool,omitempty"`
	Snapshots      *SnapshotStatus       `json:"snapshots,omitempty"`
	// PerImageNetwork is the operator's network ceiling of each image it names (contract 1.4).
	PerImageNetwork map[string]settings.ImageNetwork `json:"per_image_network,omitempty"`
}

// Info answers adapter::info.
func (s *Service) Info(context.Context, json.RawMessage) (any, error) {
	r := InfoReply{Adapter: Name, AdapterVersion: s.opt.Version, Contract: Contract, Accelerator: s.opt.Accelerator,
		GuestArch: s.opt.GuestArch, FileShare: s.opt.Settings.FileShare, PerImageNetwork: s.opt.Settings.PerImageNetwork}
	if s.opt.Driver != nil {
		r.Driver = s.opt.Driver.Name()
	}
	if s.pool != nil {
		r.WarmPool = s.pool.status()
	}
	if s.snaps != nil {
		var restored []string
		s.mu.Lock()
		for id, b := range s.boxes {
			if b.fromSnapshot && !b.stopped {
				restored = append(restored, id)
			}
		}
		s.mu.Unlock()
		r.Snapshots = s.snaps.status(restored)
	}
	return r, nil
}

// CatalogList answers catalog::list.
func (s *Service) CatalogList(context.Context, json.RawMessage) (any, error) {
	return map[string]any{"images": s.cat.List()}, nil
}

// CreateRequest is the body of create.
type CreateRequest struct {
	Image    *string `json:"image"`
	CPUs     *uint32 `json:"cpus"`
	MemoryMB *uint32 `json:"memory_mb"`
	Name     *string `json:"name"`
	// Network is false or "off" (none, the default), true or "on" (the outside, never the
	// host's loopback), or an egress policy {"allow": [...], "deny": [...]} (contract 1.4).
	Network         json.RawMessage `json:"network"`
	IdleTimeoutSecs *uint64         `json:"idle_timeout_secs"`
	Env             json.RawMessage `json:"env"`
	// SnapshotID restores a copy of a snapshot sandbox::snapshot made instead of booting an image.
	SnapshotID *string `json:"snapshot_id"`
}

// CreateReply is the reply of create.
type CreateReply struct {
	SandboxID string `json:"sandbox_id"`
	Image     string `json:"image"`
}

// Create answers create.
func (s *Service) Create(ctx context.Context, raw json.RawMessage) (any, error) {
	var req CreateRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	var box *sandbox
	var err error
	if req.SnapshotID != nil {
		box, err = s.createFromSnapshot(ctx, req)
	} else {
		box, err = s.create(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	return CreateReply{SandboxID: box.id, Image: box.image}, nil
}

func (s *Service) create(ctx context.Context, req CreateRequest) (*sandbox, error) {
	p, err := s.createParams(req)
	if err != nil {
		return nil, err
	}
	img, err := s.reserve(*req.Image, p.cpus, p.mem)
	if err != nil {
		return nil, err
	}
	defer func() {
		s.mu.Lock()
		s.booting--
		s.mu.Unlock()
	}()

	if err := s.imageNetwork(img.Name, &p); err != nil {
		return nil, err
	}
	st := s.opt.Settings
	if s.pool != nil && poolable(st, p.cpus, p.mem, p.network) {
		if got, ok := s.pool.take(ctx, img.Name); ok {
			return s.addBox(req, uuid.NewString(), img.Name, p.idle, got, p.env, "from the warm pool"), nil
		}
	}
	return s.bootFresh(ctx, req, img, p)
}

// createParams are the resources of a create request, its defaults filled in from the settings.
type createParams struct {
	env       []string
	cpus, mem uint32
	idle      time.Duration
	network   bool
	egress    []*vm.Egress // the policies the network is held to (the image's, then the creator's)
}

// createParams checks a create request against the minimums and fills in the defaults.
func (s *Service) createParams(req CreateRequest) (createParams, error) {
	if req.Image == nil || *req.Image == "" {
		return createParams{}, scode.Invalid("image is required (a catalog name such as 'python' or 'node')")
	}
	env, err := parseEnv(req.Env)
	if err != nil {
		return createParams{}, err
	}
	st := s.opt.Settings
	p := createParams{env: env, cpus: st.DefaultCPUs, mem: st.DefaultMemoryMB}
	if req.CPUs != nil {
		p.cpus = *req.CPUs
	}
	if req.MemoryMB != nil {
		p.mem = *req.MemoryMB
	}
	if p.cpus < settings.MinCPUs {
		return createParams{}, scode.Invalid(fmt.Sprintf("cpus must be at least %d", settings.MinCPUs))
	}
	if p.mem < settings.MinMemoryMB {
		return createParams{}, scode.Invalid(fmt.Sprintf("memory_mb must be at least %d", settings.MinMemoryMB))
	}
	p.idle = time.Duration(st.DefaultIdleTimeoutSecs) * time.Second
	if req.IdleTimeoutSecs != nil {
		p.idle = time.Duration(*req.IdleTimeoutSecs) * time.Second
	}
	on, e, err := parseNetwork(req.Network)
	if err != nil {
		return createParams{}, err
	}
	p.network = on
	if e != nil {
		p.egress = []*vm.Egress{e}
	}
	return p, nil
}

// parseNetwork reads the network of a create or run request: absent, false or "off" is none;
// a malformed value or policy entry is S001 naming it.
func parseNetwork(raw json.RawMessage) (bool, *vm.Egress, error) {
	if len(raw) == 0 {
		return false, nil, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, nil, scode.Invalid("network: " + err.Error())
	}
	on, e, err := vm.ParseNetwork("network", v)
	if err != nil {
		return false, nil, scode.Invalid(err.Error())
	}
	return on, e, nil
}

// imageNetwork holds a networked sandbox of image to the operator's per_image_network: an
// image set off refuses the network (S400), one with a policy adds it to the creator's, so a
// destination must pass both; the creator can narrow the operator's policy, never widen it.
func (s *Service) imageNetwork(image string, p *createParams) error {
	n, ok := s.opt.Settings.PerImageNetwork[image]
	switch {
	case !p.network || !ok:
		return nil
	case !n.On:
		return scode.Limit(fmt.Sprintf("network: the adapter setting per_image_network.%s is off, so sandboxes of image %s have no network", image, image))
	case n.Egress != nil:
		p.egress = append([]*vm.Egress{n.Egress}, p.egress...)
	}
	return nil
}

// networkMode is how list shows a sandbox's network: off, on, or policy (held to one or more
// egress policies).
func networkMode(p createParams) string {
	if p.network && len(p.egress) > 0 {
		return "policy"
	}
	return vm.NetworkMode(p.network, nil)
}

// reserve checks the concurrency limit and the image's caps under one lock and, when the sandbox
// may boot, counts it as booting; the caller gives the slot back.
func (s *Service) reserve(image string, cpus, mem uint32) (catalog.Image, error) {
	st := s.opt.Settings
	s.mu.Lock()
	defer s.mu.Unlock()
	if uint32(s.liveLocked()) >= st.MaxConcurrentSandboxes {
		return catalog.Image{}, scode.Limit(fmt.Sprintf("max_concurrent_sandboxes (%d) reached", st.MaxConcurrentSandboxes))
	}
	img, err := s.cat.Lookup(image)
	if err != nil {
		return catalog.Image{}, err
	}
	if caps, ok := st.PerImageCaps[img.Name]; ok {
		if caps.MaxCPUs > 0 && cpus > caps.MaxCPUs {
			return catalog.Image{}, scode.Limit(fmt.Sprintf("cpus=%d exceeds per-image cap %d", cpus, caps.MaxCPUs))
		}
		if caps.MaxMemoryMB > 0 && mem > caps.MaxMemoryMB {
			return catalog.Image{}, scode.Limit(fmt.Sprintf("memory_mb=%d exceeds per-image cap %d", mem, caps.MaxMemoryMB))
		}
	}
	s.booting++
	return img, nil
}

// bootFresh resolves the image's root filesystem and boots a new machine for it.
func (s *Service) bootFresh(ctx context.Context, req CreateRequest, img catalog.Image, p createParams) (*sandbox, error) {
	st := s.opt.Settings
	rootfs, err := s.opt.Images.Resolve(ctx, img.Name, img.OCIRef, st.AutoInstall)
	if err != nil {
		if e, ok := scode.As(err); ok {
			return nil, e
		}
		if errors.Is(err, ErrNotCached) {
			return nil, scode.RootfsMissing(img.Name, img.OCIRef)
		}
		return nil, scode.PullFailed(img.Name, err.Error())
	}

	id := uuid.NewString()
	// A short directory name keeps the machine's socket paths under the 108-byte limit.
	stateDir := filepath.Join(s.opt.StateDir, strings.ReplaceAll(id, "-", "")[:16])
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, scode.BootFailed("cannot create the machine state directory: " + err.Error())
	}
	env := p.env
	if p.network {
		env = RewriteLoopback(env)
	}
	var makeSnapshot func()
	if s.snaps != nil {
		var m vm.Machine
		if m, makeSnapshot = s.snaps.restore(ctx, s.streamCtx, id, img.Name, rootfs, p, env, stateDir); m != nil {
			box := s.addBox(req, id, img.Name, p.idle, pooled{m: m, stateDir: stateDir}, nil, fmt.Sprintf("%d cpus, %d MiB, from a snapshot", p.cpus, p.mem))
			s.mu.Lock()
			box.fromSnapshot = true
			s.mu.Unlock()
			return box, nil
		}
	}
	m, err := s.opt.Driver.Boot(ctx, vm.Spec{
		RootFS:    rootfs,
		CPUs:      int(p.cpus),
		MemoryMB:  int(p.mem),
		Env:       env,
		Network:   p.network,
		Egress:    p.egress,
		StateDir:  stateDir,
		ScratchMB: int(p.mem) / 2,
		Hostname:  hostname(id),
	})
	if err != nil {
		os.RemoveAll(stateDir)
		return nil, scode.BootFailed(excerpt.Tail(vm.BootDetail(err), 0, bootErrorTail))
	}
	if makeSnapshot != nil {
		makeSnapshot()
	}
	box := s.addBox(req, id, img.Name, p.idle, pooled{m: m, stateDir: stateDir}, nil, fmt.Sprintf("%d cpus, %d MiB, network %s", p.cpus, p.mem, networkMode(p)))
	s.mu.Lock()
	box.network = networkMode(p)
	s.mu.Unlock()
	return box, nil
}

// addBox records a booted machine as a live sandbox; env is layered under each exec's.
func (s *Service) addBox(req CreateRequest, id, image string, idle time.Duration, got pooled, env []string, how string) *sandbox {
	now := s.opt.Now()
	box := &sandbox{id: id, image: image, created: now, lastActive: now, idle: idle, machine: got.m, env: env, stateDir: got.stateDir}
	if req.Name != nil {
		box.name = *req.Name
	}
	s.mu.Lock()
	s.boxes[id] = box
	s.mu.Unlock()
	s.opt.Logf("sandbox %s created (image %s, %s, driver %s)", box.id, image, how, s.opt.Driver.Name())
	return box
}

// liveLocked counts sandboxes that hold a VM or are booting one.
func (s *Service) liveLocked() int {
	n := s.booting
	for _, b := range s.boxes {
		if !b.stopped {
			n++
		}
	}
	return n
}

// ExecRequest is the body of exec.
type ExecRequest struct {
	SandboxID string          `json:"sandbox_id"`
	Cmd       string          `json:"cmd"`
	Args      []string        `json:"args"`
	Argv      []string        `json:"argv"`
	Stdin     *string         `json:"stdin"`
	Env       json.RawMessage `json:"env"`
	TimeoutMS *uint64         `json:"timeout_ms"`
	Workdir   *string         `json:"workdir"`
}

// ExecReply is the reply of exec (contract 1.1): each stream is cut at OutputCap and its
// *_truncated flag set (req A5).
type ExecReply struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        *int   `json:"exit_code"`
	TimedOut        bool   `json:"timed_out"`
	DurationMS      uint64 `json:"duration_ms"`
	Success         bool   `json:"success"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
}

// Exec answers exec.
func (s *Service) Exec(ctx context.Context, raw json.RawMessage) (any, error) {
	var req ExecRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	return s.exec(ctx, req)
}

func (s *Service) exec(ctx context.Context, req ExecRequest) (*ExecReply, error) {
	id, err := checkID(req.SandboxID)
	if err != nil {
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
	stdin, err := parseStdin(req.Stdin)
	if err != nil {
		return nil, err
	}
	timeout, err := s.execTimeout(req.TimeoutMS)
	if err != nil {
		return nil, err
	}
	box, err := s.admit(id, true)
	if err != nil {
		return nil, err
	}
	defer s.release(box)
	workdir := ""
	if req.Workdir != nil {
		workdir = *req.Workdir
	}
	if len(box.env) > 0 {
		env = append(append([]string(nil), box.env...), env...)
	}
	res, err := box.machine.Exec(ctx, vm.ExecRequest{
		Argv: argv, Env: env, Stdin: stdin, Workdir: workdir, Timeout: timeout, OutputCap: OutputCap,
	})
	if err != nil {
		if machineDone(box.machine) {
			return nil, scode.Stopped(id)
		}
		return nil, scode.BootFailed("the sandbox's guest agent is unreachable: " + err.Error())
	}
	return execReply(res), nil
}

func (s *Service) execTimeout(ms *uint64) (time.Duration, error) {
	t := DefaultExecTimeout
	if ms != nil {
		if *ms == 0 {
			return 0, scode.Invalid("timeout_ms must be at least 1")
		}
		t = time.Duration(*ms) * time.Millisecond
	}
	if limit := time.Duration(s.opt.Settings.MaxExecTimeoutMS) * time.Millisecond; t > limit {
		t = limit
	}
	return t, nil
}

func execReply(res vm.ExecResult) *ExecReply {
	out, outCut := capBytes(res.Stdout)
	errOut, errCut := capBytes(res.Stderr)
	r := &ExecReply{
		Stdout: string(out), Stderr: string(errOut),
		ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationMS:      uint64(res.Duration / time.Millisecond),
		StdoutTruncated: res.StdoutTruncated || outCut,
		StderrTruncated: res.StderrTruncated || errCut,
	}
	if res.TimedOut {
		r.ExitCode = nil
	}
	r.Success = !r.TimedOut && r.ExitCode != nil && *r.ExitCode == 0
	return r
}

func capBytes(b []byte) ([]byte, bool) {
	if len(b) > OutputCap {
		return b[:OutputCap], true
	}
	return b, false
}

// admit looks up a live sandbox, bumps its idle clock and, for an exec, takes a slot. A paused
// sandbox is resumed first.
func (s *Service) admit(id string, exec bool) (*sandbox, error) {
	return s.admitCtx(context.Background(), id, exec)
}

// admitCtx is admit, a resume bounded by ctx.
func (s *Service) admitCtx(ctx context.Context, id string, exec bool) (*sandbox, error) {
	for {
		box, paused, err := s.admitRunning(id, exec)
		if paused == nil {
			return box, err
		}
		if err := s.resumeBox(ctx, paused); err != nil {
			return nil, err
		}
	}
}

// admitRunning is admit of a sandbox that is not paused; a paused one is returned as paused.
func (s *Service) admitRunning(id string, exec bool) (box, paused *sandbox, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	box, ok := s.boxes[id]
	if !ok {
		return nil, nil, scode.NotFound(id)
	}
	if box.parked() && !box.stopped {
		return nil, box, nil
	}
	if !box.stopped && machineDone(box.machine) {
		s.markStoppedLocked(box)
	}
	if box.stopped {
		return nil, nil, scode.Stopped(id)
	}
	if exec {
		if box.inflight >= s.opt.Settings.MaxConcurrentExecPerSandbox {
			return nil, nil, scode.ExecCap(id)
		}
		box.inflight++
	}
	box.lastActive = s.opt.Now()
	return box, nil, nil
}

// release ends an exec: frees the slot and bumps the idle clock.
func (s *Service) release(box *sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	box.inflight--
	box.lastActive = s.opt.Now()
}

// parked says the box is paused or being paused: its machine has ended or is about to, which is
// not an exit. The caller holds s.mu.
func (b *sandbox) parked() bool { return b.paused != nil || b.pausing }

func machineDone(m vm.Machine) bool {
	select {
	case <-m.Done():
		return true
	default:
		return false
	}
}

// ListEntry is one row of list.
type ListEntry struct {
	SandboxID      string `json:"sandbox_id"`
	Name           string `json:"name,omitempty"`
	Image          string `json:"image"`
	AgeSecs        uint64 `json:"age_secs"`
	ExecInProgress bool   `json:"exec_in_progress"`
	ExecInFlight   uint32 `json:"exec_in_flight"`
	ExecSlotsFree  uint32 `json:"exec_slots_free"`
	Stopped        bool   `json:"stopped"`
	Paused         bool   `json:"paused"`  // contract 1.3: its machine is saved to files and ended (sandbox::pause)
	Network        string `json:"network"` // contract 1.4: off, on, or policy (an egress policy holds it)
}

// List answers list.
func (s *Service) List(_ context.Context, raw json.RawMessage) (any, error) {
	var ignored struct{}
	if err := decode(raw, &ignored); err != nil {
		return nil, err
	}
	now := s.opt.Now()
	capacity := s.opt.Settings.MaxConcurrentExecPerSandbox
	s.mu.Lock()
	rows := make([]ListEntry, 0, len(s.boxes))
	created := map[string]time.Time{}
	for _, b := range s.boxes {
		if !b.stopped && !b.parked() && machineDone(b.machine) {
			s.markStoppedLocked(b)
		}
		free := uint32(0)
		if capacity > b.inflight {
			free = capacity - b.inflight
		}
		rows = append(rows, ListEntry{
			SandboxID: b.id, Name: b.name, Image: b.image,
			AgeSecs:        uint64(now.Sub(b.created) / time.Second),
			ExecInProgress: b.inflight > 0, ExecInFlight: b.inflight, ExecSlotsFree: free,
			Stopped: b.stopped, Paused: b.parked() && !b.stopped, Network: cmp.Or(b.network, "off"),
		})
		created[b.id] = b.created
	}
	s.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		ci, cj := created[rows[i].SandboxID], created[rows[j].SandboxID]
		if !ci.Equal(cj) {
			return ci.Before(cj)
		}
		return rows[i].SandboxID < rows[j].SandboxID
	})
	return map[string]any{"sandboxes": rows}, nil
}

// StopRequest is the body of stop.
type StopRequest struct {
	SandboxID string `json:"sandbox_id"`
	Wait      bool   `json:"wait"`
}

// StopReply is the reply of stop.
type StopReply struct {
	SandboxID string `json:"sandbox_id"`
	Stopped   bool   `json:"stopped"`
}

// Stop answers stop. An unknown id is S002; a stopped sandbox stops again successfully.
func (s *Service) Stop(ctx context.Context, raw json.RawMessage) (any, error) {
	var req StopRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, err := checkID(req.SandboxID)
	if err != nil {
		return nil, err
	}
	done, err := s.stop(id)
	if err != nil {
		return nil, err
	}
	if req.Wait {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	return StopReply{SandboxID: id, Stopped: true}, nil
}

// stop marks a sandbox stopped and stops its machine in the background; the returned channel is
// closed once the machine is gone.
func (s *Service) stop(id string) (<-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	box, ok := s.boxes[id]
	if !ok {
		return nil, scode.NotFound(id)
	}
	return s.markStoppedLocked(box), nil
}

// markStoppedLocked flags box stopped (once) and starts stopping its machine.
func (s *Service) markStoppedLocked(box *sandbox) <-chan struct{} {
	if box.stopped {
		return box.stopDone
	}
	box.stopped = true
	box.stoppedAt = s.opt.Now()
	box.stopDone = make(chan struct{})
	endProcesses(box)
	closeExposuresLocked(box)
	s.stops.Add(1)
	go func() {
		defer s.stops.Done()
		defer close(box.stopDone)
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := box.machine.Stop(ctx); err != nil {
			s.opt.Logf("sandbox %s: stop: %v", box.id, err)
		}
		os.RemoveAll(box.stateDir)
	}()
	return box.stopDone
}

// Reap stops every sandbox idle for longer than its idle timeout (one with an attached process
// stream or an open connection through an exposed port is busy, not idle; a detached process
// or an exposed port without connections alone does not keep it), reclaims a busy one once
// idle timeout + max_exec_timeout_ms + 60 s have passed, and forgets sandboxes stopped long ago.
func (s *Service) Reap() {
	if s.pool != nil {
		s.pool.prune()
	}
	now := s.opt.Now()
	maxExec := time.Duration(s.opt.Settings.MaxExecTimeoutMS) * time.Millisecond
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, b := range s.boxes {
		if b.stopped {
			if now.Sub(b.stoppedAt) >= stoppedRetention {
				delete(s.boxes, id)
			}
			continue
		}
		if b.parked() {
			continue // a paused sandbox holds neither CPU nor RAM: it waits for a call or a stop
		}
		idleFor := now.Sub(b.lastActive)
		switch {
		case machineDone(b.machine):
			s.opt.Logf("sandbox %s: its VM exited", id)
		case b.inflight == 0 && len(b.atts) == 0 && openConnsLocked(b) == 0 && idleFor >= b.idle:
			if s.opt.Settings.IdleAction == settings.IdlePause {
				if !b.autoPausing {
					b.autoPausing = true
					s.stops.Add(1)
					go s.autoPause(b, idleFor)
				}
				continue
			}
			s.opt.Logf("sandbox %s: reaped after %s idle", id, idleFor.Round(time.Second))
		case b.inflight > 0 && idleFor >= b.idle+maxExec+busyGrace:
			s.opt.Logf("sandbox %s: reclaimed while busy after %s", id, idleFor.Round(time.Second))
		default:
			continue
		}
		s.markStoppedLocked(b)
	}
}

// RunReaper calls Reap every interval until ctx ends.
func (s *Service) RunReaper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Reap()
		}
	}
}

// Shutdown aborts the fs::read streams, stops the warm pool and every sandbox and waits for
// their machines and streams (or ctx).
func (s *Service) Shutdown(ctx context.Context) {
	s.stopStream()
	if s.pool != nil {
		s.pool.stop()
	}
	s.mu.Lock()
	for _, b := range s.boxes {
		s.markStoppedLocked(b)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.stops.Wait()
		s.streams.Wait()
		if s.snaps != nil {
			s.snaps.wait() // streamCtx, cancelled above, ends them
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// networkAsked reports whether a request's network value asks for any network (a malformed one
// counts, so it is refused rather than ignored).
func networkAsked(raw json.RawMessage) bool {
	on, _, err := parseNetwork(raw)
	return on || err != nil
}
