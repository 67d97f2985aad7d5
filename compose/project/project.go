// Package project runs one compose project against an engine: it starts the containers in
// start_after order with their reserved environment and layered configuration, waits for each
// to register (engine::workers::list) within its startup timeout, supervises them (a worker that
// dies takes its dependents down), stops them politely, rolls back a failed up, boots VM
// workers through the sandbox adapter and cleans up their state.
//
// It owns no engine and no command line: `iii compose` gives it an engine connection, a
// supervisor and the installed packages.
package project

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/state"
	"github.com/iii-go/iii/compose/supervisor"
	"github.com/iii-go/iii/engine/protocol"
)

// Container states reported by status.
const (
	StateStarting = "starting"
	StateReady    = "ready"
	StateFailed   = "failed"
	StateStopped  = "stopped"
)

// Engine is the connection the project calls the engine through (a *protocol.Worker).
type Engine interface {
	Call(ctx context.Context, fn string, payload any, opts ...protocol.CallOption) (json.RawMessage, error)
}

// The daemon's worker connection is the Engine a project calls through.
var _ Engine = (*protocol.Worker)(nil)

// Package is an installed package:// container.
type Package struct {
	Name    string
	Version string
	// Kind is "binary" (Exec runs on the host) or "bundle" (Dir is booted as a VM worker).
	Kind string
	Exec string
	Dir  string
	// DefaultConfig is the package's default configuration (the lowest layer), nil if none.
	DefaultConfig any
}

// Options configure a Project.
type Options struct {
	File      *composefile.File
	State     state.Dir
	EngineURL string // what workers get as III_URL
	TokenFile string // what workers get as III_TOKEN_FILE
	// OwnerTokenFile is the token Compose's own connection presents: it alone may publish
	// configuration entries (on an attached engine once the engine's config grants it).
	OwnerTokenFile string
	// Managed says Compose started the engine itself.
	Managed bool
	Engine  Engine
	// VMEngine is the connection Compose calls the adapter's <prefix>::worker::* through; nil
	// means Engine. Those functions admit only the project token's holders and Compose's owner
	// token of the project, so on an engine that has no grant for that owner token (one Compose
	// attaches to with that engine's owner credential) it is a connection presenting the
	// project token.
	VMEngine Engine
	Sup      *supervisor.Supervisor
	// Packages are the installed package:// containers by key.
	Packages map[string]Package
	// PackageCache is the package cache directory (an adapter host root).
	PackageCache string
	// Home is the user's home (where the adapter keeps VM state); default $HOME.
	Home string
	Out  io.Writer
	// Poll is the readiness polling interval (default 200 ms).
	Poll time.Duration
	// LookupEnv is Compose's environment: the baseline workers inherit (PATH, HOME, ...) and
	// $III_COMPOSE_MAX_PARALLEL_STARTS. nil is an empty one.
	LookupEnv func(string) (string, bool)
}

func (p *Project) lookupEnv(k string) (string, bool) {
	if p.opts.LookupEnv == nil {
		return "", false
	}
	return p.opts.LookupEnv(k)
}

func (p *Project) getenv(k string) string {
	v, _ := p.lookupEnv(k)
	return v
}

// Container is the runtime view of one container.
type Container struct {
	Key       string `json:"container"`
	State     string `json:"state"`
	PID       int    `json:"pid,omitempty"`
	Owned     bool   `json:"owned"`
	LogPath   string `json:"log_path"`
	LastError string `json:"last_error,omitempty"`
	// Version is the installed version of a package container.
	Version string `json:"version,omitempty"`
	VM      bool   `json:"vm,omitempty"`
	VMID    string `json:"vm_id,omitempty"`
	// Restarts counts the restarts its restart policy made since Compose started it.
	Restarts int `json:"restarts"`
}

// Project is a running compose project.
type Project struct {
	opts Options

	mu         sync.Mutex
	file       *composefile.File
	containers map[string]*Container
	// adapterRoots are the host roots the running adapter was started with.
	adapterRoots []string
	outMu        sync.Mutex
	stateMu      sync.Mutex // state.json read-modify-write
	// policy is the restart policy's bookkeeping (restartpolicy.go).
	policy policyState
}

// New returns a project; nothing starts until Up.
func New(opts Options) *Project {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Poll == 0 {
		opts.Poll = 200 * time.Millisecond
	}
	if opts.Home == "" {
		opts.Home, _ = os.UserHomeDir()
	}
	p := &Project{opts: opts, file: opts.File, containers: map[string]*Container{}}
	if opts.Sup != nil {
		opts.Sup.OnExit = p.onExit
	}
	return p
}

// File is the compose file the project runs.
func (p *Project) File() *composefile.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.file
}

// Namespace is the project namespace.
func (p *Project) Namespace() string { return p.File().Namespace }

// SetFile replaces the compose file (compose::restart re-reads it) and the installed packages.
func (p *Project) SetFile(f *composefile.File, pkgs map[string]Package) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.file = f
	if pkgs != nil {
		p.opts.Packages = pkgs
	}
}

// Packages returns the installed packages by container key.
func (p *Project) Packages() map[string]Package {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opts.Packages
}

// printf writes one progress line.
func (p *Project) printf(format string, args ...any) {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	fmt.Fprintf(p.opts.Out, format+"\n", args...)
}

// Progress prints one docker-compose-like line for a container: " ✔ Container api  Ready".
func (p *Project) Progress(key, what string) {
	mark := "⠿"
	switch what {
	case "Ready", "Stopped", "Removed", "Downloaded", "Resolved":
		mark = "✔"
	case "Failed", "Exited":
		mark = "✘"
	}
	p.printf(" %s Container %-20s %s", mark, key, what)
}

// Warn prints a warning line.
func (p *Project) Warn(msg string) { p.printf("warning: %s", trimWarning(msg)) }

func trimWarning(s string) string {
	const w = "warning: "
	if len(s) >= len(w) && s[:len(w)] == w {
		return s[len(w):]
	}
	return s
}

// Status returns every container of the file with its state, in file order.
func (p *Project) Status() []Container {
	f := p.File()
	vms := map[string]bool{}
	for _, k := range f.Order {
		vms[k] = p.IsVM(k)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Container, 0, len(f.Order))
	for _, k := range f.Order {
		c := Container{Key: k, State: StateStopped, LogPath: p.opts.State.LogPath(k)}
		if cur := p.containers[k]; cur != nil {
			c = *cur
		}
		c.Version = p.opts.Packages[k].Version
		if vms[k] {
			c.VM, c.VMID = true, p.VMID(k)
		}
		out = append(out, c)
	}
	return out
}

func (p *Project) setState(key string, fn func(c *Container)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.containers[key]
	if c == nil {
		c = &Container{Key: key, LogPath: p.opts.State.LogPath(key)}
		p.containers[key] = c
	}
	fn(c)
}

func (p *Project) state(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.containers[key]; c != nil {
		return c.State
	}
	return StateStopped
}

// running reports whether key is starting, ready, or waiting for its restart policy.
func (p *Project) running(key string) bool {
	s := p.state(key)
	return s == StateReady || s == StateStarting || s == StateRestarting
}

// Dependents returns the containers that depend on key, directly or not, in stop order (the
// furthest dependents first).
func Dependents(f *composefile.File, key string) []string {
	set := map[string]bool{}
	var visit func(k string)
	visit = func(k string) {
		for _, o := range f.Order {
			if set[o] {
				continue
			}
			for _, d := range f.Containers[o].StartAfter {
				if d == k {
					set[o] = true
					visit(o)
					break
				}
			}
		}
	}
	visit(key)
	order := f.StartOrder()
	var out []string
	for i := len(order) - 1; i >= 0; i-- {
		if set[order[i]] {
			out = append(out, order[i])
		}
	}
	return out
}

// Dependencies returns key's transitive start_after closure plus key, in start order.
func Dependencies(f *composefile.File, key string) []string {
	set := map[string]bool{key: true}
	var visit func(k string)
	visit = func(k string) {
		c := f.Containers[k]
		if c == nil {
			return
		}
		for _, d := range c.StartAfter {
			if !set[d] {
				set[d] = true
				visit(d)
			}
		}
	}
	visit(key)
	var out []string
	for _, k := range f.StartOrder() {
		if set[k] {
			out = append(out, k)
		}
	}
	return out
}

// unknown returns UNKNOWN_CONTAINER when key is set and not in the file.
func (p *Project) unknown(key string) error {
	f := p.File()
	if key == "" || f.Containers[key] != nil {
		return nil
	}
	keys := append([]string(nil), f.Order...)
	sort.Strings(keys)
	return errcode.New(errcode.UnknownContainer, "container '%s' is not in %s (containers: %v)", key, f.Path, keys)
}

// StateDir is the project's state directory.
func (p *Project) StateDir() string { return p.opts.State.Path }

// persist writes the containers' records into state.json (owner-only), keeping the rest of it.
func (p *Project) persist() {
	p.editState(func(rec *state.Record) {
		rec.Children = map[string]state.Child{}
		for _, c := range p.Status() {
			if c.State == StateStopped && c.LastError == "" {
				continue
			}
			ch := state.Child{Container: c.Key, PID: c.PID, Status: c.State, LastError: c.LastError}
			if proc := p.opts.Sup.Get(c.Key); proc != nil && c.PID == proc.PID {
				ch.StartedAt = proc.Started
			}
			rec.Children[c.Key] = ch
		}
	})
}

// rememberVM records in state.json that key has adapter-owned state under vmID.
func (p *Project) rememberVM(key, vmID string) {
	p.editVMs(func(m map[string]string) { m[key] = vmID })
}

// forgetVM drops key's record once its state is deleted.
func (p *Project) forgetVM(key string) { p.editVMs(func(m map[string]string) { delete(m, key) }) }

func (p *Project) editVMs(fn func(map[string]string)) {
	p.editState(func(rec *state.Record) {
		if rec.VMs == nil {
			rec.VMs = map[string]string{}
		}
		fn(rec.VMs)
	})
}

// editState reads state.json, applies fn and writes it back, under stateMu so that concurrent
// edits do not lose each other's changes. A state.json that cannot be read is left alone.
func (p *Project) editState(fn func(*state.Record)) {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	rec, err := p.opts.State.Load()
	if err != nil {
		return
	}
	fn(&rec)
	_ = p.opts.State.Save(rec)
}

// CleanupRemoved deletes the adapter-owned state of VM containers that an earlier run started
// and the file no longer declares (removed while Compose was stopped, req J4), and returns the
// warnings for those it could not delete (req J5).
func (p *Project) CleanupRemoved(ctx context.Context) []string {
	rec, err := p.opts.State.Load()
	if err != nil {
		return nil
	}
	f := p.File()
	var gone []string
	for k := range rec.VMs {
		if f.Containers[k] == nil {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	return p.cleanupVMs(ctx, f, gone)
}
