package project

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/configlayer"
	"github.com/iii-go/iii/compose/engineconf"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/sandboxadapter"
	"github.com/iii-go/iii/compose/state"
	"github.com/iii-go/iii/compose/supervisor"
	"github.com/iii-go/iii/compose/token"
	"github.com/iii-go/iii/compose/vmstate"
	"github.com/iii-go/iii/engine/protocol"
	engineerr "github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/excerpt"
	"github.com/iii-go/iii/internal/base/fspath"
	"github.com/iii-go/iii/internal/base/procgroup"
	"github.com/iii-go/iii/internal/base/tokens"
)

// Engine functions Compose relies on besides engine::workers::list.
const (
	FnConfigGet     = "configuration::get"
	FnConfigPublish = "configuration::publish"
)

// Adapter environment: its host roots at start (path-list separated) and its function prefix.
const (
	EnvHostRoots     = "III_SANDBOX_HOST_ROOTS"
	EnvAdapterPrefix = "III_SANDBOX_PREFIX"
)

// hostEnv is the baseline environment a worker inherits from Compose.
var hostEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM",
	"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "III_REGISTRY_URL", "III_COMPOSE_STATE_DIR"}

// IsAdapter reports whether c is the sandbox adapter container.
func IsAdapter(c *composefile.Container) bool {
	return c.IsPackage() && c.Source.Name == sandboxadapter.Name
}

// AdapterKey returns the key of the file's adapter container, "" when it declares none.
func AdapterKey(f *composefile.File) string {
	for _, k := range f.Order {
		if IsAdapter(f.Containers[k]) {
			return k
		}
	}
	return ""
}

// AdapterPrefix is the adapter's function prefix: engine.sandbox.adapter, else sandbox-libkrun.
func AdapterPrefix(f *composefile.File) string {
	if f.Engine != nil && f.Engine.Sandbox != nil && f.Engine.Sandbox.Adapter != "" {
		return f.Engine.Sandbox.Adapter
	}
	return composefile.DefaultSandboxAdapter
}

// plan is how one container starts.
type plan struct {
	key     string
	c       *composefile.Container
	argv    []string
	dir     string
	vm      bool
	vmDir   string // host directory of a VM worker
	image   string // base image of a VM worker
	command string // start command inside a VM worker
}

// planFor decides how key starts.
func (p *Project) planFor(f *composefile.File, key string) (*plan, error) {
	c := f.Containers[key]
	pl := &plan{key: key, c: c}
	if c.IsPackage() {
		pkg, ok := p.Packages()[key]
		if !ok {
			return nil, errcode.New(errcode.PackageNotInstalled, "container '%s': %s is not installed; run iii compose build", key, c.Source.Raw)
		}
		switch pkg.Kind {
		case "bundle":
			m, err := composefile.ReadManifest(pkg.Dir)
			if err != nil {
				return nil, err
			}
			pl.vm, pl.vmDir = true, pkg.Dir
			if m != nil {
				pl.image, pl.command = m.Runtime.BaseImage, m.Scripts.Start
			}
		default:
			pl.argv, pl.dir = []string{pkg.Exec}, filepath.Dir(pkg.Exec)
		}
	} else {
		m, err := composefile.ReadManifest(c.Source.Dir)
		if err != nil {
			return nil, err
		}
		run := c.Scripts.Run
		if run == "" && m != nil {
			run = m.Scripts.Start
		}
		if m.IsVM() {
			pl.vm, pl.vmDir, pl.image, pl.command = true, c.Source.Dir, m.Runtime.BaseImage, run
		} else {
			if run == "" {
				return nil, errcode.New(errcode.MissingStartCommand, "container '%s': %s has no scripts.run and its %s has no scripts.start",
					key, c.Source.Raw, composefile.ManifestName)
			}
			pl.argv, pl.dir = []string{"/bin/sh", "-c", run}, c.Source.Dir
		}
	}
	if c.WorkingDir != "" {
		pl.dir = c.WorkingDir
		if !filepath.IsAbs(pl.dir) {
			pl.dir = filepath.Join(f.Dir, pl.dir)
		}
	}
	return pl, nil
}

// IsVM reports whether key runs as a VM worker.
func (p *Project) IsVM(key string) bool {
	pl, err := p.planFor(p.File(), key)
	return err == nil && pl.vm
}

// VMID is the vm_id of a VM container of this project.
func (p *Project) VMID(key string) string {
	return vmstate.ID(filepath.Dir(p.opts.State.ComposeFile), p.opts.State.Path, key)
}

var idUnsafe = regexp.MustCompile(`[^a-z0-9_-]+`)

// ConfigID returns the configuration id a container owns: config_name, the adapter's
// <namespace>-sandbox-libkrun, or a readable prefix and a 16-hex digest of namespace and key.
func ConfigID(f *composefile.File, key string) string {
	c := f.Containers[key]
	if c.ConfigName != "" {
		return c.ConfigName
	}
	if IsAdapter(c) {
		return configlayer.AdapterEntryID(f.Namespace)
	}
	sum := sha256.Sum256([]byte(f.Namespace + "\x00" + key))
	prefix := idUnsafe.ReplaceAllString(strings.ToLower(f.Namespace+"-"+key), "-")
	if len(prefix) > 46 {
		prefix = prefix[:46]
	}
	return prefix + "-" + hex.EncodeToString(sum[:8])
}

// layeredConfig builds and publishes key's configuration and writes it to the state directory.
// It returns the file path and id, or "" when the container has no configuration at all.
// config_override is the top layer: its keys take effect at every start, and a valid value there
// replaces a bad one the entry holds (req C5, D6).
func (p *Project) layeredConfig(ctx context.Context, f *composefile.File, key string) (path, id string, err error) {
	c := f.Containers[key]
	pkg := p.Packages()[key]
	id = ConfigID(f, key)
	if pkg.DefaultConfig == nil && c.ConfigOverride == nil && c.ConfigName == "" && !IsAdapter(c) {
		return "", "", nil
	}
	current, err := p.currentEntry(ctx, id)
	if err != nil {
		return "", "", errcode.New(errcode.ConfigFetchFailed, "container '%s': reading configuration '%s': %w", key, id, err)
	}
	defaults, err := configlayer.Normalize(pkg.DefaultConfig)
	if err != nil {
		return "", "", errcode.New(errcode.ConfigFetchFailed, "container '%s': package defaults: %w", key, err)
	}
	var override any
	if c.ConfigOverride != nil {
		if override, err = configlayer.Normalize(c.ConfigOverride); err != nil {
			return "", "", errcode.New(errcode.InvalidComposeFile, "container '%s': config_override: %w", key, err)
		}
	}
	value := configlayer.Layers(defaults, current, override)
	if _, err := p.opts.Engine.Call(ctx, FnConfigPublish, map[string]any{"id": id, "value": value}); err != nil {
		var pe *protocol.Error
		if !p.opts.Managed && errors.As(err, &pe) && pe.Code == engineerr.Forbidden {
			return "", "", errcode.New(errcode.ConfigPublishFailed, "%s", p.grantHint(key, id, pe.Message))
		}
		return "", "", errcode.New(errcode.ConfigPublishFailed, "container '%s': publishing configuration '%s': %w", key, id, err)
	}
	b, err := yaml.Marshal(value)
	if err != nil {
		return "", "", err
	}
	path = p.opts.State.ConfigPath(key)
	if err := state.WriteFileAtomic(path, b, 0o600); err != nil {
		return "", "", errcode.New(errcode.IOError, "writing %s: %w", path, err)
	}
	return path, id, nil
}

// grantHint says how to let Compose hold key's entry on an engine it attaches to that gave it
// no owner credential (one that protects namespaces, or another user's): that engine's config
// must name Compose's owner token in its namespaces: list (req C6, D3, D4).
func (p *Project) grantHint(key, id, refusal string) string {
	ns := p.Namespace()
	return fmt.Sprintf("container '%s': the engine at %s refused to let Compose publish configuration '%s' (%s). "+
		"Compose holds every configuration entry it builds, on an engine you run as on one it starts, and only an owner token may publish: "+
		"workers holding the project token may not. An engine whose config.yaml has no namespaces: list writes an owner credential "+
		"for a Compose of its own user (~/%s/<host>_<port>); this one gave none, so it protects namespaces or runs as another user. "+
		"Grant Compose's owner token in that engine's config.yaml (the files are mode 0600; Compose keeps both):\n%s"+
		"then restart the engine and run iii compose --up again",
		key, p.opts.EngineURL, id, refusal, tokens.OwnerDir, engineconf.OwnerGrant(ns, p.opts.TokenFile, p.opts.OwnerTokenFile))
}

// currentEntry returns the entry's stored value (template form), nil when there is none: an
// engine with no entry gives back the package defaults (req D4).
func (p *Project) currentEntry(ctx context.Context, id string) (any, error) {
	raw, err := p.opts.Engine.Call(ctx, FnConfigGet, map[string]any{"id": id, "raw": true})
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == engineerr.NotFound {
			return nil, nil
		}
		return nil, err
	}
	var out struct {
		Value any `json:"value"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out.Value, nil
}

// environment builds a worker's environment: host baseline, env_file, environment, then the
// reserved III_* variables.
func (p *Project) environment(f *composefile.File, key, configPath, configID string) ([]string, error) {
	c := f.Containers[key]
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, k := range hostEnv {
		if v, ok := p.lookupEnv(k); ok {
			set(k, v)
		}
	}
	for _, ef := range c.EnvFile {
		path := ef
		if !filepath.IsAbs(path) {
			path = filepath.Join(f.Dir, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, errcode.New(errcode.MissingEnvFile, "container '%s': env_file %s: %w", key, path, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
			if ok {
				set(strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"'`))
			}
		}
	}
	for _, k := range c.EnvOrder {
		set(k, c.Environment[k])
	}
	set("III_URL", p.opts.EngineURL)
	set("III_NAMESPACE", f.Namespace)
	set("III_COMPOSE_NAMESPACE", f.Namespace)
	set("III_COMPOSE_FILE", f.Path)
	set("III_COMPOSE_DIR", f.Dir)
	set("III_WORKER_NAME", key)
	if configPath != "" {
		set("III_CONFIG", configPath)
		set("III_CONFIG_NAME", configID)
	}
	if p.opts.TokenFile != "" {
		set(token.EnvTokenFile, p.opts.TokenFile)
	}
	if IsAdapter(c) {
		set(EnvHostRoots, strings.Join(p.HostRoots(f), string(os.PathListSeparator)))
		set(EnvAdapterPrefix, AdapterPrefix(f))
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

// withTokenValue gives a process worker (and its pre_run and post_run scripts) III_TOKEN, the
// project token's value, beside III_TOKEN_FILE: every 0.26 SDK presents III_TOKEN (as a Bearer
// token) to register in a protected namespace. It goes into the process environment only: never
// into a VM worker's (startVM is given the environment without it), nor the sandbox adapter's,
// whose children are VMs; never onto a command line or into a log. A value the container sets itself (env_file or
// environment:) is kept.
func (p *Project) withTokenValue(env []string, key string) ([]string, error) {
	if p.opts.TokenFile == "" {
		return env, nil
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, token.EnvToken+"=") {
			return env, nil
		}
	}
	v, err := token.Value(p.opts.TokenFile)
	if err != nil {
		return nil, errcode.New(errcode.IOError, "container '%s': reading the project token for %s: %w", key, token.EnvToken, err)
	}
	return append(env, token.EnvToken+"="+v), nil
}

// HostRoots are the directories the adapter may mount, fixed when it starts: the compose
// directory, the package cache and each declared path:// VM worker's directory (req G1, G2).
func (p *Project) HostRoots(f *composefile.File) []string {
	roots := []string{f.Dir}
	if p.opts.PackageCache != "" {
		roots = append(roots, p.opts.PackageCache)
	}
	for _, k := range f.Order {
		c := f.Containers[k]
		if c.IsPackage() {
			continue
		}
		if m, err := composefile.ReadManifest(c.Source.Dir); err == nil && m.IsVM() && !fspath.Within(c.Source.Dir, f.Dir) {
			roots = append(roots, c.Source.Dir)
		}
	}
	return roots
}

// runHook runs a pre_run or post_run script with the worker's environment and a timeout.
func runHook(ctx context.Context, key, which, script, dir string, env []string, timeout time.Duration, log string) error {
	if script == "" {
		return nil
	}
	if timeout <= 0 {
		timeout = composefile.DefaultPreRunTimeout
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(hctx, "/bin/sh", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = procgroup.Attr(true)
	cmd.Cancel = func() error { return procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL) }
	var out lockedBuffer
	var sink io.Writer = io.Discard
	if f, ferr := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); ferr == nil {
		defer f.Close()
		sink = f
	}
	ow, ew := supervisor.NewLineWriter(supervisor.StreamStdout, sink), supervisor.NewLineWriter(supervisor.StreamStderr, sink)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, ow), io.MultiWriter(&out, ew)
	err := supervisor.Spawn(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	_, _ = ow.Close(), ew.Close()
	switch {
	case err == nil:
		return nil
	case hctx.Err() == context.DeadlineExceeded:
		return errcode.New(errcode.HookTimeout, "container '%s': %s ran past %v", key, which, timeout)
	case errors.Is(err, exec.ErrNotFound):
		return errcode.New(errcode.HookSpawnFailed, "container '%s': %s could not start: %w", key, which, err)
	}
	return errcode.New(errcode.HookFailed, "container '%s': %s failed (%w): %s", key, which, err, excerpt.Tail(out.String(), 5, 0))
}

// lockedBuffer is a bytes.Buffer two copying goroutines may write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start starts one container and waits until it is ready.
func (p *Project) start(ctx context.Context, f *composefile.File, key string) error {
	c := f.Containers[key]
	p.setState(key, func(ct *Container) { ct.State, ct.LastError, ct.Owned = StateStarting, "", true })
	p.Progress(key, "Starting")
	err := p.startAndWait(ctx, f, key, c)
	if err != nil {
		p.setState(key, func(ct *Container) { ct.State, ct.LastError = StateFailed, err.Error() })
		p.Progress(key, "Failed")
		p.persist()
		return err
	}
	p.setState(key, func(ct *Container) { ct.State = StateReady })
	p.Progress(key, "Ready")
	p.persist()
	p.afterReady(f, key)
	return nil
}

func (p *Project) startAndWait(ctx context.Context, f *composefile.File, key string, c *composefile.Container) error {
	pl, err := p.planFor(f, key)
	if err != nil {
		return err
	}
	if taken, err := p.registered(ctx, f.Namespace, key); err != nil {
		return err
	} else if taken != nil {
		return errcode.New(errcode.ContainerNameTaken, "container '%s': a live worker (pid %d) already holds '%s' in namespace '%s'", key, taken.PID, key, f.Namespace)
	}
	cfgPath, cfgID, err := p.layeredConfig(ctx, f, key)
	if err != nil {
		return err
	}
	env, err := p.environment(f, key, cfgPath, cfgID)
	if err != nil {
		return err
	}
	if !pl.vm && !IsAdapter(c) {
		if env, err = p.withTokenValue(env, key); err != nil {
			return err
		}
	}
	log := p.opts.State.LogPath(key)
	hookDir := pl.dir
	if hookDir == "" {
		hookDir = pl.vmDir
	}
	if err := runHook(ctx, key, "pre_run", c.Scripts.PreRun, hookDir, env, c.Scripts.PreRunTimeout, log); err != nil {
		return err
	}
	timeout := f.StartupTimeout
	if c.StartupTimeout > 0 {
		timeout = c.StartupTimeout
	}
	if pl.vm {
		return p.startVM(ctx, f, pl, env, timeout)
	}
	if IsAdapter(c) {
		p.mu.Lock()
		p.adapterRoots = p.HostRoots(f)
		p.mu.Unlock()
	}
	proc, err := p.opts.Sup.Start(supervisor.Spec{Name: key, Argv: pl.argv, Dir: pl.dir, Env: env, LogPath: log})
	if err != nil {
		return errcode.New(errcode.SpawnFailed, "container '%s' could not start: %w", key, err)
	}
	p.setState(key, func(ct *Container) { ct.PID = proc.PID })
	if err := p.waitReady(ctx, f, key, timeout, proc.Done()); err != nil {
		_, _ = p.opts.Sup.Stop(key, f.StopTimeout)
		return err
	}
	if IsAdapter(c) {
		p.adapterWarnings(f, key)
	}
	return runHook(ctx, key, "post_run", c.Scripts.PostRun, hookDir, env, c.Scripts.PreRunTimeout, log)
}

type liveWorker struct {
	Name       string   `json:"name"`
	Namespace  string   `json:"namespace"`
	PID        int      `json:"pid"`
	Registered bool     `json:"registered"`
	Functions  []string `json:"functions"`
}

func (p *Project) workers(ctx context.Context) ([]liveWorker, error) {
	raw, err := p.opts.Engine.Call(ctx, protocol.FnListWorkers, map[string]any{})
	if err != nil {
		return nil, errcode.New(errcode.EngineCallFailed, "engine::workers::list: %w", err)
	}
	var out struct {
		Workers []liveWorker `json:"workers"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, errcode.New(errcode.EngineCallFailed, "engine::workers::list: %w", err)
	}
	return out.Workers, nil
}

// registered returns the live worker registered as (ns, name), or nil.
func (p *Project) registered(ctx context.Context, ns, name string) (*liveWorker, error) {
	ws, err := p.workers(ctx)
	if err != nil {
		return nil, err
	}
	for i := range ws {
		if ws[i].Registered && ws[i].Name == name && ws[i].Namespace == ns {
			return &ws[i], nil
		}
	}
	return nil, nil
}

// waitReady polls engine::workers::list until key registers in the project namespace, the
// process exits (exited may be nil for VM workers) or the timeout passes.
func (p *Project) waitReady(ctx context.Context, f *composefile.File, key string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(p.opts.Poll)
	defer tick.Stop()
	wrongNS := ""
	for {
		ws, err := p.workers(ctx)
		if err != nil {
			return err
		}
		if err := p.checkIdentity(f, key, ws, false); err != nil {
			return err
		}
		for _, w := range ws {
			if w.Registered && w.Name == key {
				if w.Namespace == f.Namespace {
					return nil
				}
				wrongNS = w.Namespace
			}
		}
		select {
		case <-exited:
			return errcode.New(errcode.ChildExitedBeforeRegistration, "container '%s' exited before it registered; the end of %s:\n%s",
				key, p.opts.State.LogPath(key), supervisor.LogTail(p.opts.State.LogPath(key), 10))
		case <-deadline.C:
			if err := p.checkIdentity(f, key, ws, true); err != nil {
				return err
			}
			if wrongNS != "" {
				return errcode.New(errcode.WorkerIgnoredNamespace, "container '%s' registered in namespace '%s' instead of '%s' (III_NAMESPACE)", key, wrongNS, f.Namespace)
			}
			return errcode.New(errcode.StartupTimeout, "container '%s' did not register within %v; see %s", key, timeout, p.opts.State.LogPath(key))
		case <-ctx.Done():
			return errcode.New(errcode.OperationCancelled, "container '%s': the start was interrupted before it registered: %w", key, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
