// Package daemon is the `compose` worker: it serves the 14 compose::* functions of iii's Compose
// in its namespace for the project it runs. add, remove and update run
// as cancellable operations (operations.go), synchronous unless the caller sets wait=false.
// Every compose::* function is registered protected: the engine answers FORBIDDEN to callers
// without the project token (or Compose's owner token); `iii call` finds the token through
// package tokens.
package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/project"
	"github.com/iii-go/iii/compose/sandboxadapter"
	"github.com/iii-go/iii/compose/supervisor"
	"github.com/iii-go/iii/engine/protocol"
)

// Deps are the compose-file and package operations the daemon delegates.
type Deps struct {
	// Load parses the compose file at path.
	Load func(path string) (*composefile.File, error)
	// Install resolves the file's package containers through the lock (re-resolving the keys
	// in update, or every package container when update holds "*") and installs them.
	Install func(ctx context.Context, f *composefile.File, update []string) (map[string]project.Package, error)
	// AddContainer writes a container into the file (comments kept) and returns its key.
	AddContainer func(path, key, worker, version string) error
	// SetVersion rewrites a container's version range in the file (comments kept).
	SetVersion func(path, key, version string) error
	// RemoveContainer deletes a container and every reference to it from the file.
	RemoveContainer func(path, key string) error
}

// Daemon serves compose::* for one project.
type Daemon struct {
	// Namespace is the daemon's: where compose::* is served (--namespace, else the project's).
	// The project's containers register in the project's namespace (Project.Namespace: the
	// file's namespace:, else default), as iii does when the two differ.
	Namespace string
	Project   *project.Project
	Deps      Deps
	// Stopped is closed when compose::stop asks the daemon to exit.
	Stopped chan struct{}

	opMu     sync.Mutex // one mutation at a time
	stopOnce sync.Once
	ops      operations // add, remove and update operations (operations.go)
}

// New returns a daemon for p.
func New(namespace string, p *project.Project, deps Deps) *Daemon {
	d := &Daemon{Namespace: namespace, Project: p, Deps: deps, Stopped: make(chan struct{})}
	d.gateRestarts()
	return d
}

// Request is the payload every compose::* function accepts (all fields optional).
type Request struct {
	Namespace string   `json:"namespace,omitempty"`
	File      string   `json:"file,omitempty"`
	Container string   `json:"container,omitempty"`
	Worker    any      `json:"worker,omitempty"`
	Workers   []string `json:"workers,omitempty"`
	// compose::logs (logs.go).
	Cursors map[string]supervisor.Cursor `json:"cursors,omitempty"`
	Tail    *int                         `json:"tail,omitempty"`
	Stream  string                       `json:"stream,omitempty"`
	WaitMS  int                          `json:"wait_ms,omitempty"`
	// compose::schema (schema.go).
	FunctionID string `json:"function_id,omitempty"`
	// compose::add, remove, update, operation and cancel (operations.go).
	OperationID         string `json:"operation_id,omitempty"`
	ProgressOperationID string `json:"progress_operation_id,omitempty"`
	Wait                *bool  `json:"wait,omitempty"`
}

func (r Request) workers() []string {
	out := append([]string(nil), r.Workers...)
	switch w := r.Worker.(type) {
	case string:
		out = append(out, w)
	case []any:
		for _, x := range w {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// checkWorker refuses a worker= that is neither a string nor a list of strings. iii's
// compose::* take worker as one string; a list of them is this project's way to add several at
// once. An object (iii has no object form), a number or a list holding one of those would
// otherwise be dropped without a word, so it is INVALID_WORKER_SPEC naming the entry.
func (r Request) checkWorker(id string) error {
	bad := func(i int, v any) error {
		b, _ := json.Marshal(v)
		where := "worker"
		if i >= 0 {
			where = fmt.Sprintf("worker[%d]", i)
		}
		return errcode.New(errcode.InvalidWorkerSpec, "%s: %s is %s: write worker=NAME[@VERSION], worker=./DIR, or a list of those strings", id, where, b)
	}
	switch w := r.Worker.(type) {
	case nil, string:
	case []any:
		for i, x := range w {
			if _, ok := x.(string); !ok {
				return bad(i, x)
			}
		}
	default:
		return bad(-1, w)
	}
	return nil
}

// decodeRequest reads the request of compose function id; an unknown field or a value of the
// wrong type is refused with the code documented for that function's bad fields:
// INVALID_REQUEST for compose::logs (a malformed cursor, tail or wait_ms), INVALID_WORKER_SPEC
// for the others.
func decodeRequest(id string, raw json.RawMessage) (Request, error) {
	var r Request
	if len(raw) == 0 || string(raw) == "null" {
		return r, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		code := errcode.InvalidWorkerSpec
		if id == FnLogs {
			code = errcode.InvalidRequest
		}
		return r, errcode.New(code, "%s: bad request: %w", id, err)
	}
	return r, r.checkWorker(id)
}

// Register adds the compose::* functions (handlers.go) to w.
func (d *Daemon) Register(w *protocol.Worker) error {
	for id, h := range d.functions() {
		fn := func(ctx context.Context, raw json.RawMessage) (any, error) {
			r, err := decodeRequest(id, raw)
			if err != nil {
				return nil, coded(err)
			}
			if r.Namespace != "" && r.Namespace != d.Namespace {
				return nil, coded(errcode.New(errcode.WrongDaemon, "this daemon serves namespace '%s', not '%s'; route with --namespace %s", d.Namespace, r.Namespace, r.Namespace))
			}
			if err := d.checkFile(r.File); err != nil {
				return nil, coded(err)
			}
			if h.mut {
				d.opMu.Lock()
				defer d.opMu.Unlock()
			}
			out, err := h.handler(ctx, r)
			if err != nil {
				return out, coded(err)
			}
			return out, nil
		}
		// Protected: the engine admits only callers holding the project token (or Compose's
		// owner token), so no other local process or web page drives the project.
		if err := w.Register(id, fn, protocol.WithDescription(h.desc), protocol.Protected()); err != nil {
			return err
		}
	}
	return nil
}

// coded turns a Compose error into a wire error {code, message}.
func coded(err error) error {
	e := errcode.As(err, errcode.EngineCallFailed)
	return protocol.NewError(e.Code, "%s", e.Message)
}

// checkFile accepts no file or the project's own file.
func (d *Daemon) checkFile(file string) error {
	if file == "" {
		return nil
	}
	abs := file
	if !filepath.IsAbs(abs) {
		wd, _ := os.Getwd()
		abs = filepath.Join(wd, file)
	}
	if _, err := os.Stat(abs); err != nil {
		return errcode.New(errcode.ComposeFileUnreadable, "cannot read %s: %w", abs, err)
	}
	own := d.Project.File().Path
	if a, err := filepath.EvalSymlinks(abs); err == nil {
		abs = a
	}
	if o, err := filepath.EvalSymlinks(own); err == nil {
		own = o
	}
	if abs != own {
		return errcode.New(errcode.UnknownProject, "this daemon runs %s, not %s", own, abs)
	}
	return nil
}

// HoldMutations makes compose::* mutations wait until release is called; --up holds them from
// before the daemon registers until its initial StartProject is done.
func (d *Daemon) HoldMutations() (release func()) {
	d.opMu.Lock()
	var once sync.Once
	return func() { once.Do(d.opMu.Unlock) }
}

// Settle waits, for at most limit, until no compose::* mutation is in flight, then holds them
// off for good: Compose is exiting, and an operation the engine died under still prints its
// warnings (req J5) before the rest of the project stops.
func (d *Daemon) Settle(limit time.Duration) {
	held := make(chan struct{})
	go func() {
		d.opMu.Lock()
		close(held)
	}()
	select {
	case <-held:
	case <-time.After(limit):
	}
}

// StartProject is the initial up of --up (call it while holding mutations): it starts the whole
// project, then deletes the VM state of containers removed from the file since the last run.
func (d *Daemon) StartProject(ctx context.Context) (project.Result, error) {
	res, err := d.Project.Up(ctx, "")
	if err == nil {
		res.Warnings = d.Project.CleanupRemoved(ctx)
	}
	return res, err
}

func (d *Daemon) up(ctx context.Context, r Request) (any, error) {
	if d.Project.Packages() == nil {
		// A daemon started without --up installs the file's packages on its first up.
		f, pkgs, err := d.Reload(ctx)
		if err != nil {
			return nil, err
		}
		d.Project.SetFile(f, pkgs)
	}
	return d.Project.Up(ctx, r.Container)
}

func (d *Daemon) down(ctx context.Context, r Request) (any, error) {
	return d.Project.Down(ctx, r.Container)
}

// Status is the reply of compose::status.
type Status struct {
	// Namespace is the daemon's (compose::*), ProjectNamespace the containers'.
	Namespace        string              `json:"namespace"`
	ProjectNamespace string              `json:"project_namespace"`
	File             string              `json:"file"`
	StateDir         string              `json:"state_dir"`
	DaemonPID        int                 `json:"daemon_pid"`
	Containers       []project.Container `json:"containers"`
}

func (d *Daemon) status(_ context.Context, _ Request) (any, error) {
	return d.StatusNow(), nil
}

// StatusNow returns the current status.
func (d *Daemon) StatusNow() Status {
	return Status{Namespace: d.Namespace, ProjectNamespace: d.Project.Namespace(), File: d.Project.File().Path, StateDir: d.Project.StateDir(),
		DaemonPID: os.Getpid(), Containers: d.Project.Status()}
}

// Reload re-reads the project's file and installs its packages.
func (d *Daemon) Reload(ctx context.Context) (*composefile.File, map[string]project.Package, error) {
	f, err := d.Deps.Load(d.Project.File().Path)
	if err != nil {
		return nil, nil, err
	}
	// The project keeps the namespace it started in: the engine's protection of it (a managed
	// engine's config) and the running containers were set up for that one.
	f.Namespace = d.Project.Namespace()
	if err := d.checkEngineUnchanged(f); err != nil {
		return nil, nil, err
	}
	pkgs, err := d.Deps.Install(ctx, f, nil)
	if err != nil {
		return nil, nil, err
	}
	return f, pkgs, nil
}

func (d *Daemon) checkEngineUnchanged(f *composefile.File) error {
	old := d.Project.File()
	if (old.Engine == nil) != (f.Engine == nil) || (f.Engine != nil && old.Engine.URL != f.Engine.URL) {
		return errcode.New(errcode.EngineRestartRequired, "%s: the engine: section changed; stop Compose and run iii compose --up again to apply it", f.Path)
	}
	return nil
}

func (d *Daemon) restart(ctx context.Context, r Request) (any, error) {
	key := r.Container
	if ws := r.workers(); key == "" && len(ws) > 0 {
		key = ws[0]
	}
	if key == sandboxadapter.Alias {
		key = project.AdapterKey(d.Project.File())
	}
	return d.Project.Restart(ctx, key, d.Reload)
}

func (d *Daemon) stop(_ context.Context, r Request) (any, error) {
	if r.Container != "" {
		return nil, errcode.New(errcode.StopTakesNoContainer, "compose::stop stops the whole daemon; use compose::down container=%s to stop one container", r.Container)
	}
	var stopping []string
	for _, c := range d.Project.Status() {
		if c.State == project.StateReady || c.State == project.StateStarting {
			stopping = append(stopping, c.Key)
		}
	}
	// Answer first, then exit.
	go func() {
		time.Sleep(50 * time.Millisecond)
		d.stopOnce.Do(func() { close(d.Stopped) })
	}()
	return map[string]any{"daemon": "compose", "daemon_pid": os.Getpid(), "stopping": nonNil(stopping)}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (d *Daemon) validate(_ context.Context, r Request) (any, error) {
	f, err := d.Deps.Load(d.Project.File().Path)
	if err != nil {
		return nil, err
	}
	var deferred []string
	for _, k := range f.Order {
		if f.Containers[k].IsPackage() {
			deferred = append(deferred, k)
		}
	}
	return map[string]any{"namespace": f.Namespace, "start_order": f.StartOrder(), "deferred_packages": nonNil(deferred)}, nil
}

// notAvailable is the error of a Deps operation this build lacks.
func notAvailable(what string) error {
	return errcode.New(errcode.DaemonNotAvailable, "%s is not available in this build", what)
}
