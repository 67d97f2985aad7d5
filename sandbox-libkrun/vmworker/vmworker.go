// Package vmworker runs Compose's VM workers: <prefix>::worker::start|stop|status|delete boot a
// microVM per vm_id with the worker's directory inside, keep its state in
// ~/.iii/sandbox/workers/<vm_id>/, and refuse any host directory outside the roots fixed when
// the adapter started (S501). No .iii directory (the compose file's holds the project token and
// Compose's owner token) and nothing of ~/.iii/engine (the engine's owner credentials) ever
// reaches a VM: a dir or mount inside one is refused, and a copy leaves every .iii out.
package vmworker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/fspath"
	"github.com/iii-go/iii/sandbox-libkrun/adapter"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Images resolves an OCI reference to a root filesystem directory (see adapter.Images).
type Images interface {
	Resolve(ctx context.Context, name, ociRef string, autoInstall bool) (rootfsDir string, err error)
}

// Options configure a Manager.
type Options struct {
	Driver      vm.Driver
	Images      Images
	AutoInstall bool
	Roots       Roots
	ComposeDir  string // the compose file's directory; its .iii/ is never mounted
	StateRoot   string // default StateRoot()
	RunDir      string // short directory for machine sockets; default $TMPDIR/iii-vmw-<uid>
	TokenFile   string // the adapter's project token file; handed to VM workers in guest memory
	Home        string // the user's home, whose .iii/engine is never staged; default $HOME
	CPUs        int    // default vCPUs
	MemoryMB    int    // default RAM
	// DiskMB is the size of the state disk each VM worker gets on its first boot (DiskFile);
	// 0: none, the guest's writes outside its directory are lost when it stops.
	DiskMB int
	Mkfs   string // mkfs.ext4 that formats state disks; default FindMkfs of Env
	// Env is the adapter's environment, KEY=VALUE (os.Environ() in its main): $III_MKFS, and
	// what mkfs.ext4 runs with. nil is an empty one.
	Env  []string
	Logf func(format string, args ...any)
	// EngineURL is the engine the adapter connects to; its loopback port is the only one of the
	// host a VM worker's guest may reach (adapter.EngineAccess).
	EngineURL string
}

// GuestDir is where the worker's directory appears in the guest unless guest_dir says otherwise.
const GuestDir = "/workspace"

// GuestTokenFile is where a VM worker finds the project token: a file in the guest's
// memory-backed /run, written after boot, never on a mount, the state disk or in the VM's
// state directory.
const GuestTokenFile = "/run/iii/token"

// envTokenFile names the token file in a worker's environment.
const envTokenFile = "III_TOKEN_FILE"

// States a VM worker reports.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StateExited   = "exited"
	StateStopped  = "stopped"
	StateAbsent   = "absent"
)

// Manager owns every VM worker of this adapter process.
type Manager struct {
	opt     Options
	mu      sync.Mutex
	workers map[string]*worker
	wg      sync.WaitGroup
}

type worker struct {
	id       string
	name     string
	state    string
	machine  vm.Machine
	exitCode *int
	started  time.Time
	done     chan struct{} // closed when the worker's command has ended and its VM is stopped
}

// New builds a Manager.
func New(opt Options) *Manager {
	if opt.StateRoot == "" {
		opt.StateRoot = StateRoot()
	}
	if opt.RunDir == "" {
		opt.RunDir = filepath.Join(os.TempDir(), fmt.Sprintf("iii-vmw-%d", os.Getuid()))
	}
	if opt.CPUs < 1 {
		opt.CPUs = 1
	}
	if opt.MemoryMB < 128 {
		opt.MemoryMB = 512
	}
	if opt.Logf == nil {
		opt.Logf = func(string, ...any) {}
	}
	if opt.DiskMB > 0 && opt.Mkfs == "" {
		opt.Mkfs = FindMkfs(getenvOf(opt.Env))
	}
	if opt.ComposeDir != "" {
		opt.ComposeDir = canonical(opt.ComposeDir)
	}
	if opt.Home == "" {
		opt.Home, _ = os.UserHomeDir()
	}
	return &Manager{opt: opt, workers: map[string]*worker{}}
}

// Handler is one worker::* operation.
type Handler func(ctx context.Context, req json.RawMessage) (any, error)

// Handlers maps "worker::start" ... "worker::delete" to their handlers.
func (m *Manager) Handlers() map[string]Handler {
	return map[string]Handler{
		"worker::start":  m.Start,
		"worker::stop":   m.Stop,
		"worker::status": m.Status,
		"worker::delete": m.Delete,
	}
}

// MountSpec is an extra host directory for a VM worker.
type MountSpec struct {
	Host     string `json:"host"`
	Guest    string `json:"guest"`
	ReadOnly *bool  `json:"read_only"`
}

// StartRequest is the body of worker::start.
type StartRequest struct {
	VMID     string          `json:"vm_id"`
	Name     string          `json:"name"`
	Image    string          `json:"image"`
	Dir      string          `json:"dir"`
	GuestDir string          `json:"guest_dir"`
	Command  []string        `json:"command"`
	Env      json.RawMessage `json:"env"`
	// EnvFile names a file (mode 0600, JSON {"NAME": "value"}) holding more of the worker's
	// environment: values Compose keeps out of the request, where every observer of
	// worker::start would read them. Only <token dir>/vm-env/<vm_id>.json is accepted, beside
	// the adapter's project token file (EnvFilePath).
	EnvFile  string      `json:"env_file"`
	CPUs     int         `json:"cpus"`
	MemoryMB int         `json:"memory_mb"`
	Network  *bool       `json:"network"`
	Mounts   []MountSpec `json:"mounts"`
}

// StatusReply describes one VM worker.
type StatusReply struct {
	VMID        string   `json:"vm_id"`
	Name        string   `json:"name,omitempty"`
	State       string   `json:"state"`
	ExitCode    *int     `json:"exit_code,omitempty"`
	StateDir    string   `json:"state_dir"`
	StateExists bool     `json:"state_exists"`
	PIDs        []int    `json:"pids"`
	Kernel      string   `json:"kernel_release,omitempty"`
	HostRoots   []string `json:"host_roots"`
}

var vmIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func checkVMID(id string) error {
	if id == "" {
		return scode.Invalid("vm_id is required")
	}
	if !vmIDRe.MatchString(id) {
		return scode.Invalid("vm_id must match [A-Za-z0-9][A-Za-z0-9_.-]{0,127}: " + id)
	}
	return nil
}

// StateDir is the state directory of vm_id.
func (m *Manager) StateDir(id string) string { return filepath.Join(m.opt.StateRoot, id) }

// decode reads a request object into v; an unknown field is S001 naming it, so that a misspelt
// one is never ignored.
func decode(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return scode.Invalid("unknown field " + f)
		}
		return scode.Invalid(err.Error())
	}
	return nil
}

// Start boots the VM worker vm_id and starts its command. A running vm_id answers its status.
func (m *Manager) Start(ctx context.Context, raw json.RawMessage) (any, error) {
	var req StartRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	env, wantsToken, err := m.checkStart(req)
	if err != nil {
		return nil, err
	}

	m.mu.Lock()
	if w, ok := m.workers[req.VMID]; ok && (w.state == StateRunning || w.state == StateStarting) {
		m.mu.Unlock()
		return m.status(req.VMID), nil
	}
	w := &worker{id: req.VMID, name: req.Name, state: StateStarting, started: time.Now(), done: make(chan struct{})}
	m.workers[req.VMID] = w
	m.mu.Unlock()

	machine, err := m.boot(ctx, req, env)
	var execEnv []string
	if err == nil && wantsToken {
		if execEnv, err = m.handToken(ctx, machine); err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			machine.Stop(sctx)
			cancel()
		}
	}
	m.mu.Lock()
	if err != nil {
		w.state = StateStopped
		close(w.done)
		m.mu.Unlock()
		return nil, err
	}
	w.machine = machine
	w.state = StateRunning
	m.mu.Unlock()

	m.wg.Add(1)
	go m.run(w, req.Command, execEnv)
	m.opt.Logf("VM worker %s started (%s)", req.VMID, m.opt.Driver.Name())
	return m.status(req.VMID), nil
}

// checkStart validates a start request before anything touches the disk and returns its
// environment without the token-file entry, and whether the worker wants the project token.
func (m *Manager) checkStart(req StartRequest) (env []string, wantsToken bool, err error) {
	if err := checkVMID(req.VMID); err != nil {
		return nil, false, err
	}
	switch {
	case req.Image == "":
		return nil, false, scode.Invalid("image is required (the worker's runtime.base_image, an OCI reference)")
	case req.Dir == "":
		return nil, false, scode.Invalid("dir is required (the worker's directory on the host)")
	case len(req.Command) == 0 || req.Command[0] == "":
		return nil, false, scode.Invalid("command is required (the argv that starts the worker inside the VM)")
	}
	env, err = parseEnv(req.Env)
	if err != nil {
		return nil, false, err
	}
	if req.EnvFile != "" {
		more, err := m.readEnvFile(req.VMID, req.EnvFile)
		if err != nil {
			return nil, false, err
		}
		env = mergeEnv(more, env)
	}
	// A host path to the token means nothing in the guest; the token itself is handed over in
	// guest memory after boot (see handToken).
	kept := env[:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, envTokenFile+"=") {
			wantsToken = true
			continue
		}
		kept = append(kept, kv)
	}
	env = kept
	// Roots first: a directory outside them is refused before anything touches the disk.
	if err := m.opt.Roots.Check(req.Dir); err != nil {
		return nil, false, err
	}
	if err := m.checkSecrets("dir", req.Dir); err != nil {
		return nil, false, err
	}
	for _, mt := range req.Mounts {
		if mt.Host == "" || !filepath.IsAbs(mt.Guest) {
			return nil, false, scode.Invalid("each mount needs a host directory and an absolute guest path")
		}
		if err := m.opt.Roots.Check(mt.Host); err != nil {
			return nil, false, err
		}
		if err := m.checkSecrets("mount", mt.Host); err != nil {
			return nil, false, err
		}
	}
	if st, err := os.Stat(req.Dir); err != nil || !st.IsDir() {
		return nil, false, scode.Invalid("dir is not a directory: " + req.Dir)
	}
	return env, wantsToken, nil
}

// boot prepares the state directory and the mounts, then boots the machine.
func (m *Manager) boot(ctx context.Context, req StartRequest, env []string) (vm.Machine, error) {
	state := m.StateDir(req.VMID)
	if err := os.MkdirAll(filepath.Join(state, "logs"), 0o700); err != nil {
		return nil, scode.BootFailed("cannot create the state directory: " + err.Error())
	}
	meta, _ := json.MarshalIndent(map[string]any{"vm_id": req.VMID, "name": req.Name, "image": req.Image, "dir": canonical(req.Dir)}, "", "  ")
	if err := os.WriteFile(filepath.Join(state, "meta.json"), meta, 0o600); err != nil {
		return nil, scode.BootFailed("cannot write the state directory: " + err.Error())
	}
	// The worker directory is mirrored into the state directory (without any .iii/), so the VM
	// keeps its own writes there and never sees the project token.
	workdir := filepath.Join(state, "workdir")
	if err := mirror(canonical(req.Dir), workdir); err != nil {
		return nil, scode.BootFailed("copying the worker directory: " + err.Error())
	}
	guest := req.GuestDir
	if guest == "" {
		guest = GuestDir
	}
	mounts := []vm.Mount{{Host: workdir, Guest: guest}}
	for i, mt := range req.Mounts {
		host := canonical(mt.Host)
		if m.exposesToken(host) {
			copyDir := filepath.Join(state, "mounts", fmt.Sprint(i))
			if err := mirror(host, copyDir); err != nil {
				return nil, scode.BootFailed("copying a mount: " + err.Error())
			}
			host = copyDir
		}
		ro := mt.ReadOnly == nil || *mt.ReadOnly
		mounts = append(mounts, vm.Mount{Host: host, Guest: mt.Guest, ReadOnly: ro})
	}
	rootfs, err := m.opt.Images.Resolve(ctx, req.Image, req.Image, m.opt.AutoInstall)
	if err != nil {
		if e, ok := scode.As(err); ok {
			return nil, e
		}
		if errors.Is(err, adapter.ErrNotCached) {
			return nil, scode.RootfsMissing(req.Image, req.Image)
		}
		return nil, scode.PullFailed(req.Image, err.Error())
	}
	cpus, mem := req.CPUs, req.MemoryMB
	if cpus < 1 {
		cpus = m.opt.CPUs
	}
	if mem < 128 {
		mem = m.opt.MemoryMB
	}
	network := req.Network == nil || *req.Network
	var hostAccess []netip.AddrPort
	if network {
		env = adapter.RewriteLoopback(env)
		hostAccess = adapter.EngineAccess(m.opt.EngineURL)
	}
	disk, err := m.stateDisk(ctx, req.VMID, state)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(state))
	machine, err := m.opt.Driver.Boot(ctx, vm.Spec{
		RootFS: rootfs, CPUs: cpus, MemoryMB: mem, Env: env, Workdir: guest, Mounts: mounts,
		Network: network, HostAccess: hostAccess,
		StateDir: filepath.Join(m.opt.RunDir, hex.EncodeToString(sum[:6])), ScratchMB: mem / 2,
		Disk: disk,
	})
	if err != nil {
		return nil, scode.BootFailed(vm.BootDetail(err))
	}
	return machine, nil
}

// stateDisk returns the state disk of vm_id in its state directory, formatted on its first
// boot, or "" when the adapter keeps none (DiskMB 0, or no mkfs.ext4 on the host: the worker
// then runs with its writes in memory and the adapter's log says why).
func (m *Manager) stateDisk(ctx context.Context, id, state string) (string, error) {
	if m.opt.DiskMB <= 0 {
		return "", nil
	}
	disk, change, err := ensureDisk(ctx, state, m.opt.DiskMB, m.opt.Mkfs, m.opt.Env)
	switch {
	case errors.Is(err, errNoMkfs):
		m.opt.Logf("VM worker %s: no state disk, so what it writes outside its directory is lost when it stops: %v", id, err)
		return "", nil
	case err != nil:
		return "", scode.BootFailed("the state disk in " + state + " cannot be prepared: " + err.Error())
	case change == diskCreated:
		m.opt.Logf("VM worker %s: state disk %s created (%d MiB, sparse)", id, disk, m.opt.DiskMB)
	case change == diskGrown:
		m.opt.Logf("VM worker %s: state disk %s grown to %d MiB (worker_disk_mb)", id, disk, m.opt.DiskMB)
	case change == diskLarger:
		m.opt.Logf("VM worker %s: state disk %s is larger than worker_disk_mb (%d MiB) and is kept as it is: a disk never shrinks", id, disk, m.opt.DiskMB)
	}
	return disk, nil
}

// handToken writes the adapter's project token into the guest's memory-backed /run and returns
// the environment entry that points the worker at it.
func (m *Manager) handToken(ctx context.Context, machine vm.Machine) ([]string, error) {
	if m.opt.TokenFile == "" {
		return nil, nil
	}
	tok, err := os.ReadFile(m.opt.TokenFile)
	if err != nil {
		return nil, scode.BootFailed("the project token file cannot be read: " + err.Error())
	}
	body, _ := json.Marshal(map[string]any{"path": GuestTokenFile, "content": string(tok), "mode": "0600", "parents": true})
	if _, err := machine.FS(ctx, "write", body); err != nil {
		return nil, scode.BootFailed("handing the project token to the VM failed")
	}
	return []string{envTokenFile + "=" + GuestTokenFile}, nil
}

// exposesToken reports whether mounting host would show a .iii directory: the compose file's, or
// any other below host (found by a walk that stops at the first one). Such a mount is handed to
// the VM as a copy without any .iii (mirror).
func (m *Manager) exposesToken(host string) bool {
	if m.opt.ComposeDir != "" && fspath.Within(m.opt.ComposeDir, host) {
		return true
	}
	found := false
	filepath.WalkDir(host, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == hiddenDir && path != host {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// checkSecrets refuses (S001, naming the path) a dir or mount (what) that is or lies inside a
// .iii directory below the host root that admits it, or inside ~/.iii/engine: the compose
// file's .iii holds the project token and Compose's owner token, ~/.iii/engine the engine's
// owner credentials, and none of it may reach a VM. A root itself may lie under a .iii (Compose's
// package cache, ~/.iii/compose/packages): only what lies below it counts. Call after
// Roots.Check.
func (m *Manager) checkSecrets(what, path string) error {
	p := canonical(path)
	if m.opt.Home != "" {
		engine := canonical(filepath.Join(m.opt.Home, hiddenDir, "engine"))
		if fspath.Within(p, engine) {
			return scode.Invalid(fmt.Sprintf("%s '%s' is inside %s, which holds the engine's owner credentials; nothing there is ever staged into or mounted in a VM", what, p, engine))
		}
	}
	root := m.opt.Roots.rootOf(p)
	if root == "" {
		return nil
	}
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." {
		return nil
	}
	at := root
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		at = filepath.Join(at, c)
		if c == hiddenDir {
			return scode.Invalid(fmt.Sprintf("%s '%s' is inside the .iii directory %s, where Compose keeps the project token and its owner token; nothing under a .iii directory is ever staged into or mounted in a VM: move the worker out of it", what, p, at))
		}
	}
	return nil
}

// EnvFilePath is the one env_file the adapter reads for vm_id: vm-env/<vm_id>.json in the
// directory of its project token file (tokenFile), where Compose writes it; "" without a token.
func EnvFilePath(tokenFile, vmID string) string {
	if tokenFile == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(canonical(tokenFile)), "vm-env", vmID+".json")
}

// readEnvFile reads the env_file of a start request for vm_id: it must be EnvFilePath, a regular
// file (not a link) of this user that no one else may read, holding {"NAME": "value"}. Anything
// else is S001 naming the file.
func (m *Manager) readEnvFile(vmID, path string) ([]string, error) {
	want := EnvFilePath(m.opt.TokenFile, vmID)
	if want == "" {
		return nil, scode.Invalid("env_file '" + path + "': this adapter holds no project token file, beside which Compose writes a VM worker's environment")
	}
	if filepath.Clean(path) != want && canonical(path) != want {
		return nil, scode.Invalid("env_file '" + path + "' is not " + want + ", the only file this adapter reads a VM worker's environment from")
	}
	st, err := os.Lstat(path)
	switch {
	case err != nil:
		return nil, scode.Invalid("env_file '" + path + "': " + err.Error())
	case !st.Mode().IsRegular():
		return nil, scode.Invalid("env_file '" + path + "' is not a regular file")
	case st.Mode().Perm()&0o077 != 0:
		return nil, scode.Invalid(fmt.Sprintf("env_file '%s' has mode %04o: it holds the worker's environment and must be 0600", path, st.Mode().Perm()))
	case !ownedByUs(st):
		return nil, scode.Invalid("env_file '" + path + "' belongs to another user")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, scode.Invalid("env_file '" + path + "': " + err.Error())
	}
	var mp map[string]string
	if err := json.Unmarshal(data, &mp); err != nil {
		return nil, scode.Invalid("env_file '" + path + "' must hold a JSON object of names to string values")
	}
	raw, _ := json.Marshal(mp)
	list, err := parseEnv(raw)
	if err != nil {
		return nil, scode.Invalid("env_file '" + path + "': " + strings.TrimPrefix(err.(*scode.Error).Message, "invalid request: "))
	}
	return list, nil
}

// mergeEnv is base with each entry of over set on top (over wins for a name in both).
func mergeEnv(base, over []string) []string {
	names := map[string]bool{}
	for _, kv := range over {
		name, _, _ := strings.Cut(kv, "=")
		names[name] = true
	}
	var out []string
	for _, kv := range base {
		if name, _, _ := strings.Cut(kv, "="); !names[name] {
			out = append(out, kv)
		}
	}
	return append(out, over...)
}

// run executes the worker's command, appending its output to logs/worker.log, and stops the VM
// when the command ends.
func (m *Manager) run(w *worker, argv, env []string) {
	defer m.wg.Done()
	defer close(w.done)
	logPath := filepath.Join(m.StateDir(w.id), "logs", "worker.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		m.opt.Logf("VM worker %s: log: %v", w.id, err)
	}
	res, err := w.machine.Exec(context.Background(), vm.ExecRequest{
		Argv: argv, Env: env, OutputCap: 64 << 10,
		Output: func(_ int, data []byte) {
			if logf != nil {
				logf.Write(data)
			}
		},
	})
	if logf != nil {
		logf.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w.machine.Stop(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.state == StateRunning {
		w.state = StateExited
	}
	if err == nil {
		w.exitCode = res.ExitCode
	}
	m.opt.Logf("VM worker %s ended (state %s)", w.id, w.state)
}

// IDRequest is the body of worker::stop, worker::status and worker::delete.
type IDRequest struct {
	VMID string `json:"vm_id"`
}

// Stop stops the VM worker and waits until its VM is gone. Stopping a worker that is not
// running succeeds.
func (m *Manager) Stop(ctx context.Context, raw json.RawMessage) (any, error) {
	id, err := m.stopRequested(ctx, raw)
	if err != nil {
		return nil, err
	}
	return m.status(id), nil
}

// stopRequested reads the vm_id of a worker::stop or worker::delete request, stops that VM
// worker and waits until its VM is gone (or ctx ends). It returns the vm_id.
func (m *Manager) stopRequested(ctx context.Context, raw json.RawMessage) (string, error) {
	var req IDRequest
	if err := decode(raw, &req); err != nil {
		return "", err
	}
	if err := checkVMID(req.VMID); err != nil {
		return "", err
	}
	m.stopAndWait(ctx, req.VMID)
	return req.VMID, nil
}

func (m *Manager) stopAndWait(ctx context.Context, id string) {
	m.mu.Lock()
	w, ok := m.workers[id]
	if ok && w.state == StateRunning {
		w.state = StateStopped
	}
	m.mu.Unlock()
	if !ok {
		return
	}
	if w.machine != nil {
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		w.machine.Stop(sctx)
		cancel()
	}
	select {
	case <-w.done:
	case <-ctx.Done():
	}
}

// Status answers one vm_id, or every known VM worker when vm_id is empty.
func (m *Manager) Status(_ context.Context, raw json.RawMessage) (any, error) {
	var req IDRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	if req.VMID == "" {
		m.mu.Lock()
		ids := make([]string, 0, len(m.workers))
		for id := range m.workers {
			ids = append(ids, id)
		}
		m.mu.Unlock()
		sort.Strings(ids)
		out := make([]StatusReply, 0, len(ids))
		for _, id := range ids {
			out = append(out, m.status(id))
		}
		return map[string]any{"workers": out, "host_roots": m.opt.Roots.List()}, nil
	}
	if err := checkVMID(req.VMID); err != nil {
		return nil, err
	}
	return m.status(req.VMID), nil
}

func (m *Manager) status(id string) StatusReply {
	dir := m.StateDir(id)
	_, err := os.Stat(dir)
	r := StatusReply{VMID: id, State: StateAbsent, StateDir: dir, StateExists: err == nil, PIDs: []int{}, HostRoots: m.opt.Roots.List()}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.workers[id]; ok {
		r.Name, r.State, r.ExitCode = w.name, w.state, w.exitCode
		if w.machine != nil && w.state == StateRunning {
			r.PIDs = append(r.PIDs, w.machine.PIDs()...)
			r.Kernel = w.machine.KernelRelease()
		}
	}
	return r
}

// DeleteReply is the reply of worker::delete.
type DeleteReply struct {
	VMID     string `json:"vm_id"`
	Deleted  bool   `json:"deleted"`
	StateDir string `json:"state_dir"`
}

// Delete stops the VM worker if it runs and removes its state directory.
func (m *Manager) Delete(ctx context.Context, raw json.RawMessage) (any, error) {
	id, err := m.stopRequested(ctx, raw)
	if err != nil {
		return nil, err
	}
	dir := m.StateDir(id)
	_, statErr := os.Stat(dir)
	if err := os.RemoveAll(dir); err != nil {
		return nil, scode.FS(scode.S216, "fs i/o error: removing "+dir+": "+err.Error())
	}
	m.mu.Lock()
	delete(m.workers, id)
	m.mu.Unlock()
	return DeleteReply{VMID: id, Deleted: statErr == nil, StateDir: dir}, nil
}

// Shutdown stops every VM worker and waits for them (or ctx). The VMs stop side by side: each
// may take seconds to sync its state disk and power off.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	ids := make([]string, 0, len(m.workers))
	for id := range m.workers {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	var stops sync.WaitGroup
	for _, id := range ids {
		stops.Go(func() { m.stopAndWait(ctx, id) })
	}
	stops.Wait()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseEnv accepts ["K=V"] or {"K":"V"} (sorted by key).
func parseEnv(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		var mp map[string]string
		if err := json.Unmarshal(raw, &mp); err != nil {
			return nil, scode.Invalid("env must be a list of \"K=V\" strings or a map of names to string values")
		}
		keys := slices.Sorted(maps.Keys(mp))
		for _, k := range keys {
			list = append(list, k+"="+mp[k])
		}
	}
	for _, kv := range list {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !envNameRe.MatchString(name) {
			return nil, scode.Invalid(fmt.Sprintf("env contains an invalid entry: %q (names must match `[A-Za-z_][A-Za-z0-9_]*`)", kv))
		}
	}
	return list, nil
}
