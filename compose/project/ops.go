package project

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/sandboxadapter"
	"github.com/iii-go/iii/compose/token"
	"github.com/iii-go/iii/compose/vmstate"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
	engineerr "github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/fspath"
	"github.com/iii-go/iii/internal/base/privfile"
)

// Outcome is one container's part of an operation result.
type Outcome struct {
	Container string     `json:"container"`
	State     string     `json:"state"`
	Changed   bool       `json:"changed"`
	Error     *CodedBody `json:"error,omitempty"`
}

// CodedBody is an error as {code, message}.
type CodedBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Result is the reply of compose::up and compose::down.
type Result struct {
	Status     string    `json:"status"`
	Changed    bool      `json:"changed"`
	Containers []Outcome `json:"containers"`
	// Warnings are the VM states that could not be deleted (req J5).
	Warnings []string `json:"warnings,omitempty"`
}

func body(err error) *CodedBody {
	e := errcode.As(err, errcode.EngineCallFailed)
	return &CodedBody{Code: e.Code, Message: e.Message}
}

// startOrder puts the adapter before every VM worker: they boot through it.
func (p *Project) startOrder(f *composefile.File, keys []string) []string {
	ak := AdapterKey(f)
	if ak == "" {
		return keys
	}
	hasVM, hasAdapter := false, false
	for _, k := range keys {
		hasAdapter = hasAdapter || k == ak
		hasVM = hasVM || (k != ak && p.IsVM(k))
	}
	if !hasVM {
		return keys
	}
	out := []string{ak}
	for _, k := range keys {
		if k != ak {
			out = append(out, k)
		}
	}
	if !hasAdapter && p.running(ak) {
		return out[1:]
	}
	return out
}

// Up starts the project, or only container and what it depends on. Containers already running
// are left alone. A failure stops what this call started, in reverse order, and fails with
// PROJECT_DID_NOT_START carrying the container's error.
func (p *Project) Up(ctx context.Context, container string) (Result, error) {
	if err := p.unknown(container); err != nil {
		return Result{}, err
	}
	f := p.File()
	if f.Engine != nil && !p.opts.Managed {
		return Result{}, errcode.New(errcode.EngineSectionRequiresManagedStart, "%s declares engine: (a managed engine); this daemon attached to a running engine, so run the file with iii compose --up -f %s", f.Path, f.Path)
	}
	began := time.Now()
	keys := f.StartOrder()
	if container != "" {
		keys = Dependencies(f, container)
	}
	keys = p.startOrder(f, keys)
	res := Result{Status: "ok"}
	var pending []string
	for _, k := range keys {
		if !p.running(k) {
			pending = append(pending, k)
		}
	}
	out, started := schedule(ctx, pending, p.startDeps(f, pending), parallelStarts(p.getenv(EnvMaxParallelStarts)),
		func(ctx context.Context, k string) error { return p.start(ctx, f, k) },
		func(k string, _ error) bool { return optional(f, k) })
	var failed string
	for _, k := range keys {
		o, ok := out[k]
		switch {
		case !ok:
			res.Containers = append(res.Containers, Outcome{Container: k, State: p.state(k)})
		case o.skipped:
		case o.err == nil:
			res.Changed = true
			res.Containers = append(res.Containers, Outcome{Container: k, State: StateReady, Changed: true})
		case optional(f, k):
			res.Containers = append(res.Containers, Outcome{Container: k, State: StateFailed, Error: body(o.err)})
			res.Warnings = append(res.Warnings, optionalFailed(k, o.err))
		default:
			res.Containers = append(res.Containers, Outcome{Container: k, State: StateFailed, Error: body(o.err)})
			if failed == "" {
				failed = k
			}
		}
	}
	if failed != "" {
		res.Status = "failed"
		for i := len(started) - 1; i >= 0; i-- {
			p.stop(ctx, f, started[i])
		}
		e := errcode.As(out[failed].err, errcode.EngineCallFailed)
		p.printf("up failed [%s] after %s", errcode.ProjectDidNotStart, elapsed(time.Since(began)))
		return res, errcode.New(errcode.ProjectDidNotStart, "%s did not start: container '%s': %s: %s", f.Path, failed, e.Code, e.Message)
	}
	p.printf("%s", Summary("up", countChanged(res), len(res.Containers), time.Since(began)))
	return res, nil
}

// Summary is the line iii prints when an operation on a project (up, down) succeeded, which
// scripts written for iii wait for in Compose's output (iii's start script greps for
// "^up: (nothing to do|[0-9]+ of [0-9]+ changed)"): "up: N of M changed in T", or
// "up: nothing to do (M already in place) in T" when nothing changed.
func Summary(action string, changed, total int, took time.Duration) string {
	if changed == 0 {
		return fmt.Sprintf("%s: nothing to do (%d already in place) in %s", action, total, elapsed(took))
	}
	return fmt.Sprintf("%s: %d of %d changed in %s", action, changed, total, elapsed(took))
}

// elapsed is d as iii reports it: milliseconds under a second, else seconds to one decimal.
func elapsed(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// Down stops the project, or container and everything that depends on it. VM workers keep their
// adapter-owned state, so the next boot reuses it (only compose::remove deletes it, req J4).
// It ends with iii's summary line, "down: N of M changed in T".
func (p *Project) Down(ctx context.Context, container string) (Result, error) {
	began := time.Now()
	res, err := p.down(ctx, container)
	if err == nil {
		p.printf("%s", Summary("down", countChanged(res), len(res.Containers), time.Since(began)))
	}
	return res, err
}

// countChanged is the number of containers an operation changed.
func countChanged(res Result) int {
	n := 0
	for _, o := range res.Containers {
		if o.Changed {
			n++
		}
	}
	return n
}

// StopAll stops every container when Compose exits; VM state is kept for the next run.
func (p *Project) StopAll(ctx context.Context) {
	_, _ = p.down(ctx, "")
}

func (p *Project) down(ctx context.Context, container string) (Result, error) {
	if err := p.unknown(container); err != nil {
		return Result{}, err
	}
	f := p.File()
	var keys []string
	if container != "" {
		keys = append(Dependents(f, container), container)
	} else {
		order := p.startOrder(f, f.StartOrder())
		for i := len(order) - 1; i >= 0; i-- {
			keys = append(keys, order[i])
		}
	}
	ak := AdapterKey(f)
	res := Result{Status: "ok"}
	stopAdapter := false
	for _, k := range keys {
		if k == ak {
			stopAdapter = true
			continue
		}
		changed := p.stop(ctx, f, k)
		res.Changed = res.Changed || changed
		res.Containers = append(res.Containers, Outcome{Container: k, State: StateStopped, Changed: changed})
	}
	if stopAdapter {
		changed := p.stop(ctx, f, ak)
		res.Changed = res.Changed || changed
		res.Containers = append(res.Containers, Outcome{Container: ak, State: StateStopped, Changed: changed})
	}
	return res, nil
}

// stop stops one container and reports whether it was running.
func (p *Project) stop(ctx context.Context, f *composefile.File, key string) bool {
	p.cancelRestart(key)
	if !p.running(key) && !p.opts.Sup.Running(key) {
		p.setState(key, func(c *Container) { c.State = StateStopped })
		return false
	}
	p.Progress(key, "Stopping")
	gone := p.engineGone(ctx)
	if p.IsVM(key) {
		if gone {
			p.Warn(fmt.Sprintf("container '%s': %s::worker::stop: the engine had already stopped", key, AdapterPrefix(f)))
		} else if _, err := p.vmEngine().Call(ctx, AdapterPrefix(f)+"::worker::stop", map[string]any{"vm_id": p.VMID(key)}); err != nil {
			p.Warn(fmt.Sprintf("container '%s': %s::worker::stop: %v", key, AdapterPrefix(f), err))
			gone = p.engineGone(ctx)
		}
	} else if killed, err := p.opts.Sup.Stop(key, f.StopTimeout); err != nil {
		p.Warn(err.Error())
	} else if killed {
		p.Warn(fmt.Sprintf("container '%s' did not stop within %v and was killed", key, f.StopTimeout))
	}
	if !gone {
		p.waitUnregistered(ctx, f.Namespace, key, 5*time.Second)
	}
	p.setState(key, func(c *Container) { c.State, c.PID = StateStopped, 0 })
	p.Progress(key, "Stopped")
	p.persist()
	return true
}

// engineProbe bounds how long an operation waits for Compose's engine connection before it
// treats the engine as stopped.
const engineProbe = time.Second

// engineGone reports whether Compose has lost its engine: a call still fails NOT_CONNECTED after
// engineProbe (the connection keeps retrying in the background).
func (p *Project) engineGone(ctx context.Context) bool {
	_, err := p.opts.Engine.Call(ctx, protocol.FnListFunctions, map[string]any{"namespace": p.Namespace()}, protocol.WithTimeout(engineProbe))
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Code == engineerr.NotConnected
}

// waitUnregistered waits until the engine has dropped the (ns, key) registration of a process
// that just exited, so that a restart does not find its own ghost (CONTAINER_NAME_TAKEN).
func (p *Project) waitUnregistered(ctx context.Context, ns, key string, limit time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		w, err := p.registered(ctx, ns, key)
		if err != nil || w == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cleanupVMs deletes the adapter-owned state of VM containers, starting the declared adapter
// for the call when it is not running. When it cannot (the adapter failed to start, none serves
// the namespace, or the engine had already stopped), it warns (req J5).
func (p *Project) cleanupVMs(ctx context.Context, f *composefile.File, keys []string) []string {
	if len(keys) == 0 {
		return nil
	}
	var warnings []string
	prefix := AdapterPrefix(f)
	ak := AdapterKey(f)
	why := ""
	startedForCall := false
	switch {
	case p.engineGone(ctx):
		why = "the engine had already stopped"
	case ak != "" && p.running(ak):
	case ak != "":
		if err := p.start(ctx, f, ak); err != nil {
			why = "the adapter failed to start: " + err.Error()
		} else {
			startedForCall = true
		}
	default:
		if w, err := p.adapterLive(ctx, f); err != nil {
			why = "the engine did not list its functions: " + err.Error()
		} else if !w {
			why = "the compose file does not declare the adapter and it is not running"
		}
	}
	for _, k := range keys {
		id := p.VMID(k)
		reason := why
		if reason == "" {
			err := vmstate.Delete(ctx, plainCaller{p.vmEngine()}, prefix, id)
			if err == nil {
				p.forgetVM(k)
				p.Progress(k, "Removed")
				continue
			}
			reason = err.Error()
		}
		w := vmstate.Warning(k, prefix, id, p.opts.Home, reason)
		p.Warn(w)
		warnings = append(warnings, w)
	}
	if startedForCall {
		p.stop(ctx, f, ak)
	}
	return warnings
}

// adapterLive reports whether a worker serving <prefix>::worker::delete is registered.
func (p *Project) adapterLive(ctx context.Context, f *composefile.File) (bool, error) {
	raw, err := p.opts.Engine.Call(ctx, protocol.FnListFunctions, map[string]any{})
	if err != nil {
		return false, err
	}
	return strings.Contains(string(raw), `"`+AdapterPrefix(f)+`::worker::delete"`), nil
}

// startVM boots a VM worker through the adapter's <prefix>::worker::start. The adapter's S501
// (a mount outside the host roots it read at start) fails SPAWN_FAILED naming
// `compose::restart worker=<adapter>` (req G3, G4).
func (p *Project) startVM(ctx context.Context, f *composefile.File, pl *plan, env []string, timeout time.Duration) error {
	key := pl.key
	prefix := AdapterPrefix(f)
	ak := AdapterKey(f)
	if ak == "" || !p.running(ak) {
		if live, _ := p.adapterLive(ctx, f); !live {
			return errcode.New(errcode.SpawnFailed, "container '%s' could not start: it is a VM worker and no adapter serves %s::worker::start in namespace '%s'", key, prefix, f.Namespace)
		}
	}
	id := p.VMID(key)
	p.setState(key, func(c *Container) { c.VM, c.VMID = true, id })
	payload := map[string]any{"vm_id": id, "name": key, "image": pl.image, "dir": pl.vmDir,
		"command": []string{"/bin/sh", "-c", pl.command}}
	envFile, err := p.vmEnv(payload, id, env)
	if err != nil {
		return errcode.New(errcode.SpawnFailed, "container '%s' could not start: %w", key, err)
	}
	_, err = p.vmEngine().Call(ctx, prefix+"::worker::start", payload)
	if envFile != "" {
		os.Remove(envFile) // the adapter read it while it answered
	}
	if err != nil {
		var pe *protocol.Error
		msg := err.Error()
		if errors.As(err, &pe) {
			msg = pe.Code + ": " + pe.Message
			var env struct {
				DocsURL string `json:"docs_url"`
			}
			if json.Unmarshal(pe.Raw(), &env) == nil && env.DocsURL != "" && !strings.Contains(msg, env.DocsURL) {
				msg += " (" + env.DocsURL + ")"
			}
			if pe.Code == scode.S501 {
				return errcode.New(errcode.SpawnFailed, "container '%s' could not start: %s. The adapter reads its host roots only when it starts: "+
					"run `iii call compose::restart worker=%s` (it restarts each VM worker the adapter runs and ends every sandbox), "+
					"then start '%s' with `iii call compose::up`; or move the worker under %s", key, msg, adapterContainer(f), key, f.Dir)
			}
		}
		return errcode.New(errcode.SpawnFailed, "container '%s' could not start: %s", key, msg)
	}
	p.rememberVM(key, id)
	if ak != "" {
		if v := p.Packages()[ak].Version; token.VMMountsExpose(v) && fspath.Within(f.Dir, pl.vmDir) {
			_ = token.MarkExposed(p.opts.State.Path, key, v)
		}
	}
	return p.waitReady(ctx, f, key, timeout, nil)
}

// VMEnvDir is the directory, beside the project token file, where Compose hands a VM worker's
// environment to the adapter: <vm_id>.json, mode 0600, written before worker::start and removed
// after it. The adapter reads the file named by env_file only there.
const VMEnvDir = "vm-env"

// vmEnv puts a VM worker's environment into the worker::start payload: the reserved III_*
// variables (URLs, names and paths Compose sets) inline as env, every other value (the host
// baseline, env_file and environment:, which may hold secrets) in a 0600 file beside the project
// token, named by env_file. Observers of worker::start therefore see no environment value of the
// container. It returns the file written, "" when there is no token file to put it beside.
func (p *Project) vmEnv(payload map[string]any, vmID string, env []string) (string, error) {
	inline, private := map[string]string{}, map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(composefile.Reserved, k) || p.opts.TokenFile == "" {
			inline[k] = v
		} else {
			private[k] = v
		}
	}
	payload["env"] = inline
	if p.opts.TokenFile == "" {
		return "", nil
	}
	dir := filepath.Join(filepath.Dir(p.opts.TokenFile), VMEnvDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("cannot create %s for the VM worker's environment: %w", dir, err)
	}
	data, _ := json.Marshal(private)
	path := filepath.Join(dir, vmID+".json")
	if err := privfile.WriteAtomic(path, data); err != nil {
		return "", fmt.Errorf("cannot write the VM worker's environment to %s: %w", path, err)
	}
	payload["env_file"] = path
	return path, nil
}

func adapterContainer(f *composefile.File) string {
	if k := AdapterKey(f); k != "" {
		return k
	}
	return sandboxadapter.Name
}

// adapterWarnings prints the token warnings for the adapter version that just started.
func (p *Project) adapterWarnings(f *composefile.File, key string) {
	v := p.Packages()[key].Version
	for _, w := range token.Warnings(f.Containers[key].Source.Name, v, ExposingWorkers(f)) {
		p.Warn(w)
	}
}

// ExposingWorkers lists the path:// VM workers (runtime.base_image in iii.worker.yaml) whose
// directory contains the compose file: under an adapter before 0.3.1 they can read the project
// token (req B10).
func ExposingWorkers(f *composefile.File) []string {
	var out []string
	for _, k := range f.Order {
		c := f.Containers[k]
		if c.IsPackage() {
			continue
		}
		if m, err := composefile.ReadManifest(c.Source.Dir); err == nil && m.IsVM() && fspath.Within(f.Dir, c.Source.Dir) {
			out = append(out, k)
		}
	}
	return out
}

// vmEngine is the connection the adapter's worker::* are called through (Options.VMEngine).
func (p *Project) vmEngine() Engine {
	if p.opts.VMEngine != nil {
		return p.opts.VMEngine
	}
	return p.opts.Engine
}

// plainCaller adapts Engine to vmstate.Caller.
type plainCaller struct{ e Engine }

// Call calls fn through the engine connection.
func (c plainCaller) Call(ctx context.Context, fn string, payload any) (json.RawMessage, error) {
	return c.e.Call(ctx, fn, payload)
}

// RemoveContainer stops key alone (its dependents keep running) and, for a VM container,
// deletes its adapter-owned state (req J4, J5). The caller then drops it from the file.
func (p *Project) RemoveContainer(ctx context.Context, key string) []string {
	f := p.File()
	if f.Containers[key] == nil {
		return nil
	}
	vm := p.IsVM(key)
	p.stop(ctx, f, key)
	var warnings []string
	if vm {
		warnings = p.cleanupVMs(ctx, f, []string{key})
	}
	p.mu.Lock()
	delete(p.containers, key)
	p.mu.Unlock()
	p.opts.Sup.Forget(key)
	return warnings
}
