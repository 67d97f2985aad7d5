// Package prepare runs every step of `iii compose --up` and `iii compose build` that needs no
// engine, in order, before anything starts: it validates the compose file, decides whether the
// project needs the sandbox adapter, checks or writes the lock (--frozen never writes), resolves
// package:// containers through the registry, adds the adapter container when the project needs
// it and does not declare it, refuses targets a package does not ship for, and installs the
// artifacts into the package cache. Its Result is what the runtime starts.
package prepare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/fileedit"
	"github.com/iii-go/iii/compose/lock"
	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/compose/sandboxadapter"
	"github.com/iii-go/iii/internal/base/platform"
)

// UpdateAll in Options.Update re-resolves every package container.
const UpdateAll = "*"

// AddedComment marks a container Compose wrote into the file.
const AddedComment = "added by iii compose: the sandbox adapter this project needs"

// Options select the mode and the environment of a run.
type Options struct {
	// Frozen uses the lock as is and never writes the compose file or the lock (req F1).
	Frozen bool
	// Build is `iii compose build`: path:// workers are not checked for a directory.
	Build bool
	// Namespace overrides the file's namespace; empty keeps it. iii compose passes none: its
	// --namespace names the daemon's namespace, and the packages run in the project's.
	Namespace string
	// EngineURL is --engine; it conflicts with a file that declares engine: as a mapping.
	EngineURL string
	// Update lists container keys to re-resolve even when the lock matches (UpdateAll: all).
	Update []string
	// Target is the host (default platform.Host of Lookup, which honours $III_TARGET).
	Target *platform.Target
	// Lookup is the environment: ${VAR} in the compose file and $III_REGISTRY_URL (the CLI
	// passes os.LookupEnv; nil is an empty one).
	Lookup composefile.Lookup
	// CacheDir is the package cache (default ~/.iii/compose/packages; the CLI passes
	// registry.CacheDir of $III_COMPOSE_STATE_DIR).
	CacheDir string
	// Out receives one line per step; nil discards them.
	Out io.Writer
}

// Package is an installed package:// container.
type Package struct {
	Container string
	Name      string
	Version   string
	// Type is registry.TypeBinary or registry.TypeBundle.
	Type   string
	Target string
	// Dir is the unpacked package in the cache; Exec the binary to run (binary packages).
	Dir           string
	Exec          string
	DefaultConfig map[string]any
	// Fresh says this run downloaded it.
	Fresh bool
}

// Result is a project ready to start.
type Result struct {
	// File is the compose file as it is on disk after this run (re-read when it was edited).
	File      *composefile.File
	Namespace string
	LockPath  string
	Lock      *lock.Lock
	// Packages by container key.
	Packages map[string]Package
	// Adapter describes the sandbox adapter: whether the project needs it and which container
	// runs it.
	Adapter Adapter
	// VMWorkers are the containers that run in microVMs (bundles, path:// with base_image).
	VMWorkers []string
	// FileWritten and LockWritten say what this run wrote.
	FileWritten, LockWritten bool
}

// Adapter is the project's use of the sandbox adapter.
type Adapter struct {
	// Prefix is the adapter's function prefix (engine.sandbox.adapter, default sandbox-libkrun).
	Prefix string
	// Namespace is where it runs.
	Namespace string
	// Needed says why the project needs it ("" when it does not).
	Needed string
	// Container is the key of the container that runs it, "" when none is declared.
	Container string
	// Added says this run wrote that container into the file.
	Added bool
}

type run struct {
	o      Options
	f      *composefile.File
	target platform.Target
	out    io.Writer
	res    *Result
	cache  *registry.Cache
	// sizes holds the size the registry's index gives each artifact URL resolved in this run
	// (the lock does not record sizes), so the download stops there.
	sizes map[string]int64
}

// Run prepares the project of the compose file at path.
func Run(ctx context.Context, path string, o Options) (*Result, error) {
	f, err := composefile.Load(path, o.Lookup)
	if err != nil {
		return nil, err
	}
	if f.Engine != nil && o.EngineURL != "" {
		return nil, errcode.New(errcode.EngineURLConflictsWithManaged, "%s declares engine: as a mapping, so Compose starts and owns that engine; drop --engine %s, or remove the engine: section (or leave it empty) to attach", f.Path, o.EngineURL)
	}
	r := &run{o: o, f: f, out: o.Out}
	if r.out == nil {
		r.out = io.Discard
	}
	if o.Target != nil {
		r.target = *o.Target
	} else {
		r.target = platform.Host(r.getenv)
	}
	ns := f.Namespace
	if o.Namespace != "" {
		if !composefile.ValidNamespace(o.Namespace) {
			return nil, errcode.New(errcode.InvalidNamespace, "--namespace %q is not a namespace: use lowercase letters, digits, _ and -", o.Namespace)
		}
		ns = o.Namespace
	}
	r.res = &Result{File: f, Namespace: ns, LockPath: lock.PathFor(f.Path), Packages: map[string]Package{}}
	if err := r.pathWorkers(); err != nil {
		return nil, err
	}
	r.adapterDeclared()
	old, err := lock.Read(r.res.LockPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if o.Frozen {
		err = r.frozen(old)
	} else {
		err = r.resolve(ctx, old)
	}
	if err != nil {
		return nil, err
	}
	if err := r.platform(); err != nil {
		return nil, err
	}
	if err := r.install(ctx); err != nil {
		return nil, err
	}
	if !o.Frozen {
		if err := r.write(); err != nil {
			return nil, err
		}
	}
	return r.res, nil
}

// Check makes the decisions of Run that need no registry, no cache and no write, for a parsed
// file and its lock (nil when there is none), as `iii doctor` needs them: the VM workers, whether
// the project needs the adapter (req F2) and which container declares it, and whether the locked
// packages ship for target (req H3). It returns the adapter plan and the errors Run would give:
// a path:// worker's directory or manifest, SANDBOX_ADAPTER_NOT_DECLARED (what --frozen gives
// when the adapter is needed and not declared) and UNSUPPORTED_PLATFORM.
func Check(f *composefile.File, l *lock.Lock, target platform.Target) (Adapter, []error) {
	r := &run{o: Options{Frozen: true}, f: f, target: target, out: io.Discard,
		res: &Result{File: f, Namespace: f.Namespace, LockPath: lock.PathFor(f.Path), Packages: map[string]Package{}}}
	var errs []error
	if err := r.pathWorkers(); err != nil {
		errs = append(errs, err)
	}
	r.adapterDeclared()
	if l != nil {
		r.addBundles(l)
	}
	why := r.needs()
	r.res.Adapter.Needed = why
	if why != "" && r.res.Adapter.Container == "" {
		errs = append(errs, r.notDeclared(why))
	}
	if l != nil {
		r.res.Lock = l
		if err := r.platform(); err != nil {
			errs = append(errs, err)
		}
	}
	return r.res.Adapter, errs
}

// pathWorkers finds path:// VM workers (runtime.base_image in iii.worker.yaml).
func (r *run) pathWorkers() error {
	for _, key := range r.f.Order {
		c := r.f.Containers[key]
		if c.Source.Kind != composefile.PathSource {
			continue
		}
		m, err := composefile.ReadManifest(c.Source.Dir)
		if err != nil {
			if r.o.Build && errcode.CodeOf(err) == errcode.MissingWorkerDirectory {
				continue
			}
			return errcode.New(errcode.As(err, errcode.IOError).Code, "container '%s': %s", key, errcode.As(err, errcode.IOError).Message)
		}
		if m.IsVM() {
			r.res.VMWorkers = append(r.res.VMWorkers, key)
		}
	}
	return nil
}

// adapterDeclared finds the adapter's prefix, namespace and declared container. A declared
// container is used as written: Compose adds the adapter only when none is declared and never
// removes one the user declared (req B6).
func (r *run) adapterDeclared() {
	a := &r.res.Adapter
	a.Prefix, a.Namespace = composefile.DefaultSandboxAdapter, r.res.Namespace
	if r.f.Engine != nil && r.f.Engine.Sandbox != nil {
		a.Prefix = r.f.Engine.Sandbox.Adapter
		a.Namespace = r.f.Engine.Sandbox.NamespaceFor(r.res.Namespace)
	}
	a.Container = ""
	if _, ok := r.f.Containers[a.Prefix]; ok {
		a.Container = a.Prefix
		return
	}
	for _, key := range r.f.Order {
		if c := r.f.Containers[key]; c.IsPackage() && c.Source.Name == sandboxadapter.Name {
			a.Container = key
			return
		}
	}
}

// needs explains why the project needs the adapter, or returns "": engine.sandbox for the
// project's own namespace, or a VM worker (req F2).
func (r *run) needs() string {
	if s := r.f.Engine; s != nil && s.Sandbox != nil && r.res.Adapter.Namespace == r.res.Namespace {
		return fmt.Sprintf("engine.sandbox runs the adapter in the project's namespace '%s'", r.res.Namespace)
	}
	if len(r.res.VMWorkers) > 0 {
		return fmt.Sprintf("container '%s' is a VM worker", r.res.VMWorkers[0])
	}
	return ""
}

func (r *run) wants() []lock.Want {
	var out []lock.Want
	for _, key := range r.f.Order {
		if c := r.f.Containers[key]; c.IsPackage() {
			out = append(out, lock.Want{Key: key, Worker: c.Source.Raw, Requested: c.Version})
		}
	}
	return out
}

// addBundles records bundle packages as VM workers.
func (r *run) addBundles(l *lock.Lock) {
	for _, key := range r.f.Order {
		if e, ok := l.Containers[key]; ok && e.Resolved.Type == registry.TypeBundle && r.f.Containers[key].IsPackage() {
			r.res.VMWorkers = append(r.res.VMWorkers, key)
		}
	}
}

// bundleOnWindows refuses a bundle worker on a host without VMs, before any download (req H5).
func (r *run) bundleOnWindows(l *lock.Lock) error {
	if r.target.GOOS != "windows" {
		return nil
	}
	for _, key := range r.f.Order {
		if e, ok := l.Containers[key]; ok && e.Resolved.Type == registry.TypeBundle {
			return errcode.New(errcode.BundleNeedsAVM, "container '%s': %s %s is a bundle worker, which runs in a VM, and %s has no VM support; nothing was downloaded. Run this project under WSL, or use a binary build of the worker", key, e.Resolved.Name, e.Resolved.Version, r.target.Triple)
		}
	}
	return nil
}

// notDeclared is SANDBOX_ADAPTER_NOT_DECLARED: under --frozen a project that needs the adapter
// must declare it (req F2).
func (r *run) notDeclared(why string) error {
	return errcode.New(errcode.SandboxAdapterNotDeclared, "%s needs the sandbox adapter (%s) but does not declare it, and --frozen never edits the compose file or the lock. Run `iii compose --up` once without --frozen, so Compose adds the %s container and writes %s, then commit both files", r.f.Path, why, r.res.Adapter.Prefix, filepath.Base(r.res.LockPath))
}

// frozen takes everything from the lock, which must exist and match the file.
func (r *run) frozen(l *lock.Lock) error {
	wants := r.wants()
	if l != nil {
		if err := r.bundleOnWindows(l); err != nil {
			return err
		}
		r.addBundles(l)
	}
	if why := r.needs(); why != "" && r.res.Adapter.Container == "" {
		return r.notDeclared(why)
	}
	if l == nil {
		if len(wants) > 0 {
			return lock.Required(r.res.LockPath)
		}
		l = lock.New()
	}
	if err := l.Check(r.res.LockPath, wants); err != nil {
		return err
	}
	for _, w := range wants {
		r.lockedMapping(w.Key, l.Containers[w.Key])
	}
	r.res.Lock = l
	r.res.Adapter.Needed = r.needs()
	return nil
}

func (r *run) update(key string) bool {
	for _, u := range r.o.Update {
		if u == key || u == UpdateAll {
			return true
		}
	}
	return false
}

// resolve fills the lock from the registry where the file changed, and plans the adapter.
func (r *run) resolve(ctx context.Context, old *lock.Lock) error {
	l := lock.New()
	if old != nil {
		l.Graphs = old.Graphs
	}
	for _, w := range r.wants() {
		c := r.f.Containers[w.Key]
		if e, ok := oldEntry(old, w); ok && !r.update(w.Key) {
			l.Containers[w.Key] = e
			r.lockedMapping(w.Key, e)
			continue
		}
		e, err := r.resolveOne(ctx, w.Key, c.Source.Host, c.Source.Name, c.Version, c.Source.Raw)
		if err != nil {
			return err
		}
		l.Containers[w.Key] = e
	}
	if err := r.bundleOnWindows(l); err != nil {
		return err
	}
	r.addBundles(l)
	why := r.needs()
	r.res.Adapter.Needed = why
	if why != "" && r.res.Adapter.Container == "" {
		key := r.res.Adapter.Prefix
		e, err := r.resolveOne(ctx, key, "", sandboxadapter.Name, sandboxadapter.CurrentRange(), sandboxadapter.Worker)
		if err != nil {
			return err
		}
		l.Containers[key] = e
		r.res.Adapter.Container, r.res.Adapter.Added = key, true
	}
	r.res.Lock = l
	return nil
}

func oldEntry(old *lock.Lock, w lock.Want) (*lock.Entry, bool) {
	if old == nil {
		return nil, false
	}
	e, ok := old.Containers[w.Key]
	return e, ok && e.Worker == w.Worker && e.Requested == w.Requested
}

// resolveOne asks the registry for name@selector on behalf of container key.
func (r *run) resolveOne(ctx context.Context, key, host, name, selector, worker string) (*lock.Entry, error) {
	if name == sandboxadapter.Alias {
		return nil, errcode.New(errcode.EngineWorkerIsBuiltin, "container '%s': %s is the engine's built-in sandbox router, not a worker to run. Declare the adapter instead (worker: %s, version: '%s'), or run `iii call compose::add worker=%s`, which adds exactly that", key, name, sandboxadapter.Worker, sandboxadapter.CurrentRange(), name)
	}
	c, err := registry.ForHost(host, r.getenv(registry.EnvURL))
	if err != nil {
		return nil, err
	}
	v, line, err := c.Resolve(ctx, name, selector)
	if err != nil {
		e := errcode.As(err, errcode.PackageNotResolved)
		return nil, errcode.New(e.Code, "container '%s': %s", key, e.Message)
	}
	switch v.Type {
	case registry.TypeBinary, registry.TypeBundle:
	case registry.TypeEngine:
		return nil, errcode.New(errcode.EngineWorkerIsBuiltin, "container '%s': %s %s is built into the engine (type engine); remove the container, or configure it under engine.workers", key, name, v.Version)
	default:
		return nil, errcode.New(errcode.UnsupportedPackageKind, "container '%s': %s %s has type %q, which Compose cannot run (binary or bundle only)", key, name, v.Version, v.Type)
	}
	e := &lock.Entry{Worker: worker, Requested: selector, Resolved: lock.Resolved{
		Name: name, Version: v.Version, Type: v.Type, Artifacts: map[string]lock.Artifact{},
		DefaultConfig: v.Config, Dependencies: v.Dependencies}}
	if line != nil {
		e.Resolved.IIILine = line.III
	}
	for t, a := range v.Artifacts {
		e.Resolved.Artifacts[t] = lock.Artifact{URL: a.URL, SHA256: a.SHA256}
		if a.Size > 0 {
			if r.sizes == nil {
				r.sizes = map[string]int64{}
			}
			r.sizes[a.URL] = a.Size
		}
	}
	if len(e.Resolved.Artifacts) == 0 {
		return nil, errcode.New(errcode.PackageNotResolved, "container '%s': %s %s has no artifacts in %s", key, name, v.Version, c.URL())
	}
	if line != nil {
		fmt.Fprintf(r.out, " ⠿ Container %-20s Mapped %s\n", key, mapping(e))
	} else {
		fmt.Fprintf(r.out, " ⠿ Container %-20s Resolved %s %s to %s (%s)\n", key, name, selector, v.Version, v.Type)
	}
	return e, nil
}

// lockedMapping prints the mapping of a locked entry the compatibility table resolved, so every
// run that installs it says so, not only the one that resolved it.
func (r *run) lockedMapping(key string, e *lock.Entry) {
	if e.Mapped() {
		fmt.Fprintf(r.out, " ⠿ Container %-20s Locked %s\n", key, mapping(e))
	}
}

// mapping describes an entry the registry's compatibility table resolved, as Compose prints it
// whenever it uses one: a pin of iii's versions is never replaced by this project's build
// without saying so.
func mapping(e *lock.Entry) string {
	return fmt.Sprintf("%s: iii %s → iii-go build %s (the registry's compatibility table maps iii's %s line onto it)", e.Resolved.Name, e.Requested, e.Resolved.Version, e.Resolved.IIILine)
}

// registryHost is the registry host of a package:// worker value ("" for the default registry).
func registryHost(worker string) string {
	ref := strings.TrimPrefix(worker, "package://")
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		return ref[:i]
	}
	return ""
}

// artifactKey is the lock's artifacts key for an entry on this host.
func (r *run) artifactKey(e *lock.Entry) string {
	if e.Resolved.Type == registry.TypeBundle {
		return registry.BundleKey
	}
	return r.target.Triple
}

// platform refuses binary packages that do not ship for the host target: a project that needs
// the adapter on musl Linux or an Intel Mac fails UNSUPPORTED_PLATFORM, while iii itself and
// projects without sandboxes still run there (req H3, H4).
func (r *run) platform() error {
	for _, key := range r.order() {
		e := r.res.Lock.Containers[key]
		if _, ok := e.Resolved.Artifacts[r.artifactKey(e)]; ok {
			continue
		}
		var ships []string
		for t := range e.Resolved.Artifacts {
			ships = append(ships, t)
		}
		ships = sortTargets(ships)
		msg := fmt.Sprintf("container '%s': %s %s has no build for %s. It ships: %s", key, e.Resolved.Name, e.Resolved.Version, r.target.Triple, strings.Join(ships, ", "))
		if key == r.res.Adapter.Container {
			msg += fmt.Sprintf(". This project needs the sandbox adapter (%s), which runs microVMs only on those hosts; iii itself runs on %s, so projects without sandboxes or VM workers still work here", r.res.Adapter.Needed, r.target.Triple)
		}
		return errcode.New(errcode.UnsupportedPlatform, "%s", msg)
	}
	return nil
}

// order lists the lock's containers in the file's start order, the added adapter first.
func (r *run) order() []string {
	var out []string
	if r.res.Adapter.Added {
		out = append(out, r.res.Adapter.Container)
	}
	for _, key := range r.f.StartOrder() {
		if _, ok := r.res.Lock.Containers[key]; ok {
			out = append(out, key)
		}
	}
	return out
}

// getenv is the variable k of r's environment, "" when unset.
func (r *run) getenv(k string) string {
	if r.o.Lookup == nil {
		return ""
	}
	v, _ := r.o.Lookup(k)
	return v
}

func (r *run) install(ctx context.Context) error {
	dir := r.o.CacheDir
	if dir == "" {
		var err error
		if dir, err = registry.CacheDir(""); err != nil {
			return err
		}
	}
	r.cache = &registry.Cache{Dir: dir, Progress: r.out}
	for _, key := range r.order() {
		e := r.res.Lock.Containers[key]
		ak := r.artifactKey(e)
		a := e.Resolved.Artifacts[ak]
		c, err := registry.ForHost(registryHost(e.Worker), r.getenv(registry.EnvURL))
		if err != nil {
			return err
		}
		inst, err := r.cache.Install(ctx, c, e.Resolved.Name, e.Resolved.Version, ak, registry.Artifact{URL: a.URL, SHA256: a.SHA256, Size: r.sizes[a.URL]})
		if err != nil {
			ce := errcode.As(err, errcode.PackageDownloadFailed)
			return errcode.New(ce.Code, "container '%s': %s", key, ce.Message)
		}
		p := Package{Container: key, Name: e.Resolved.Name, Version: e.Resolved.Version, Type: e.Resolved.Type,
			Target: ak, Dir: inst.Dir, DefaultConfig: e.Resolved.DefaultConfig, Fresh: inst.Fresh}
		if p.Type == registry.TypeBinary {
			exe := e.Resolved.Name
			if r.target.GOOS == "windows" {
				exe += ".exe"
			}
			p.Exec = filepath.Join(inst.Dir, exe)
			// A binary package must ship its executable; finding out at start (SPAWN_FAILED) would
			// come after the lock was written.
			if st, err := os.Lstat(p.Exec); err != nil || !st.Mode().IsRegular() {
				return errcode.New(errcode.PackageExecutableMissing, "container '%s': %s %s is a binary package, but its archive %s holds no executable named %s at its root; nothing was locked", key, p.Name, p.Version, a.URL, exe)
			}
		}
		r.res.Packages[key] = p
		if inst.Fresh {
			fmt.Fprintf(r.out, " ✔ Container %-20s Downloaded %s %s (%s)\n", key, p.Name, p.Version, ak)
		} else {
			fmt.Fprintf(r.out, " ✔ Container %-20s Cached %s %s\n", key, p.Name, p.Version)
		}
	}
	return nil
}

// write adds the adapter container to the compose file when planned, then writes the lock,
// restoring the compose file when the lock cannot be written. Only runs without --frozen; after
// it, --frozen passes (req F3).
func (r *run) write() error {
	if r.res.Adapter.Added {
		doc, err := fileedit.Load(r.f.Path)
		if err != nil {
			return err
		}
		e := r.res.Lock.Containers[r.res.Adapter.Container]
		if err := doc.AddContainer(r.res.Adapter.Container, fileedit.Container{Worker: e.Worker, Version: e.Requested, Comment: AddedComment}); err != nil {
			return err
		}
		if _, err := doc.Write(); err != nil {
			return err
		}
		r.res.FileWritten = true
		fmt.Fprintf(r.out, " + Container %-20s Added to %s: the sandbox adapter (%s, version '%s'), because %s\n", r.res.Adapter.Container, filepath.Base(r.f.Path), e.Worker, e.Requested, r.res.Adapter.Needed)
		changed, lerr := lock.Write(r.res.LockPath, r.res.Lock)
		if lerr != nil {
			if rerr := fileedit.WriteFile(r.f.Path, doc.Orig, doc.Mode); rerr != nil {
				return errcode.New(errcode.ComposeMutationRollbackFailed, "%w; restoring %s also failed: %w", lerr, r.f.Path, rerr)
			}
			return lerr
		}
		r.res.LockWritten = changed
		f, err := composefile.Load(r.f.Path, r.o.Lookup)
		if err != nil {
			return err
		}
		r.res.File = f
	} else {
		changed, err := lock.Write(r.res.LockPath, r.res.Lock)
		if err != nil {
			return err
		}
		r.res.LockWritten = changed
	}
	if r.res.LockWritten {
		fmt.Fprintf(r.out, " ✔ Lock %s written\n", r.res.LockPath)
	}
	return nil
}

// sortTargets orders triples the way the release lists them: Apple Silicon, then glibc Linux
// x86_64 and aarch64, then the rest by name.
func sortTargets(ts []string) []string {
	rank := map[string]int{"aarch64-apple-darwin": 0, "x86_64-unknown-linux-gnu": 1, "aarch64-unknown-linux-gnu": 2}
	out := append([]string(nil), ts...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0; j-- {
			a, b := out[j-1], out[j]
			ra, oka := rank[a]
			rb, okb := rank[b]
			less := (oka && okb && rb < ra) || (!oka && okb) || (!oka && !okb && b < a)
			if !less {
				break
			}
			out[j-1], out[j] = b, a
		}
	}
	return out
}
