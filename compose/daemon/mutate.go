package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/project"
	"github.com/iii-go/iii/compose/sandboxadapter"
	"github.com/iii-go/iii/compose/state"
)

// UpdateResult is the reply of compose::update.
type UpdateResult struct {
	Status    string            `json:"status"`
	Container string            `json:"container,omitempty"`
	Changed   bool              `json:"changed"`
	Versions  map[string]string `json:"versions"`
	From      map[string]string `json:"from"`
	Ranges    map[string]string `json:"ranges,omitempty"`
	Down      *project.Result   `json:"down,omitempty"`
	Up        *project.Result   `json:"up,omitempty"`
}

// containerFor finds the container a worker= value names: its key, or the package name.
func containerFor(f *composefile.File, name string) string {
	if name == sandboxadapter.Alias {
		return project.AdapterKey(f)
	}
	if f.Containers[name] != nil {
		return name
	}
	for _, k := range f.Order {
		if c := f.Containers[k]; c.IsPackage() && c.Source.Name == name {
			return k
		}
	}
	return ""
}

// mutate edits the compose file with edit, then re-reads and installs it; when either fails
// the file is restored byte for byte.
func (d *Daemon) mutate(ctx context.Context, update []string, edit func(path string) error) (*composefile.File, map[string]project.Package, error) {
	path := d.Project.File().Path
	before, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, errcode.New(errcode.IOError, "cannot read %s: %w", path, err)
	}
	st, _ := os.Stat(path)
	restore := func(cause error) error {
		if werr := state.WriteFileAtomic(path, before, st.Mode().Perm()); werr != nil {
			return errcode.New(errcode.ComposeMutationRollbackFailed, "%w; restoring %s failed too: %w", cause, path, werr)
		}
		return cause
	}
	step(ctx, "edit compose file")
	if err := edit(path); err != nil {
		return nil, nil, restore(err)
	}
	f, err := d.Deps.Load(path)
	if err != nil {
		return nil, nil, restore(err)
	}
	step(ctx, "resolve and install")
	pkgs, err := d.Deps.Install(ctx, f, update)
	if err != nil {
		return nil, nil, restore(err)
	}
	return f, pkgs, nil
}

// update implements compose::update. With worker=NAME[@VERSION] it re-resolves that package
// within its range (or moves it to VERSION); a range such as '^0.2' is kept (req B7). Bare, it
// rewrites an adapter range that admits no 0.3.1 or later (such as '^0.2') to the engine's
// contract range (^0.3), keeps one that does (such as a user's '~0.3.0'), and re-resolves every
// package worker (req B8). Either way the whole project restarts.
func (d *Daemon) update(ctx context.Context, r Request) (any, error) {
	if d.Deps.SetVersion == nil || d.Deps.Install == nil {
		return nil, notAvailable("compose::update")
	}
	old := d.Project.File()
	oldPkgs := d.Project.Packages()
	res := UpdateResult{Status: "ok", Versions: map[string]string{}, From: map[string]string{}, Ranges: map[string]string{}}
	var update []string
	var edit func(path string) error
	ws := r.workers()
	switch len(ws) {
	case 0:
		update = []string{"*"}
		ak := project.AdapterKey(old)
		edit = func(path string) error {
			if ak == "" || sandboxadapter.AdmitsCurrent(old.Containers[ak].Version) {
				return nil
			}
			res.Ranges[ak] = sandboxadapter.CurrentRange()
			return d.Deps.SetVersion(path, ak, sandboxadapter.CurrentRange())
		}
	case 1:
		name, version, _ := strings.Cut(ws[0], "@")
		key := containerFor(old, name)
		if key == "" {
			return nil, errcode.New(errcode.UnknownContainer, "no container runs '%s' in %s", name, old.Path)
		}
		if !old.Containers[key].IsPackage() {
			return nil, errcode.New(errcode.NotAPackageContainer, "container '%s' is %s; compose::update updates package:// containers only", key, old.Containers[key].Source.Raw)
		}
		res.Container = key
		update = []string{key}
		edit = func(path string) error {
			if version == "" || version == old.Containers[key].Version {
				return nil
			}
			res.Ranges[key] = version
			return d.Deps.SetVersion(path, key, version)
		}
	default:
		return nil, errcode.New(errcode.InvalidWorkerSpec, "compose::update takes one worker, got %d", len(ws))
	}
	f, pkgs, err := d.mutate(ctx, update, edit)
	if err != nil {
		return nil, err
	}
	for k, p := range pkgs {
		if update[0] != "*" && k != update[0] {
			continue
		}
		res.Versions[k] = p.Version
		res.From[k] = oldPkgs[k].Version
		res.Changed = res.Changed || p.Version != oldPkgs[k].Version
	}
	step(ctx, "restart project")
	rr, err := d.Project.Restart(ctx, "", func(context.Context) (*composefile.File, map[string]project.Package, error) { return f, pkgs, nil })
	res.Down, res.Up = rr.Down, rr.Up
	if err != nil {
		res.Status = "failed"
		return res, err
	}
	return res, nil
}

// AddResult is the reply of compose::add.
type AddResult struct {
	Status  string          `json:"status"`
	Added   []string        `json:"added"`
	Changed bool            `json:"changed"`
	Up      *project.Result `json:"up,omitempty"`
}

// add implements compose::add: each worker= is written into the file (iii-sandbox adds the
// adapter pinned to the engine's contract range, req E5), the file is re-read and installed,
// and the added containers start. A container that fails to start keeps its entry: fix the
// cause and run compose::up (req G5).
func (d *Daemon) add(ctx context.Context, r Request) (any, error) {
	if d.Deps.AddContainer == nil || d.Deps.Install == nil {
		return nil, notAvailable("compose::add")
	}
	ws := r.workers()
	if len(ws) == 0 {
		return nil, errcode.New(errcode.InvalidWorkerSpec, "compose::add needs worker=NAME[@VERSION] or worker=./DIR")
	}
	old := d.Project.File()
	type entry struct{ key, worker, version string }
	var entries []entry
	for _, w := range ws {
		e, err := parseAdd(old, w)
		if err != nil {
			return nil, err
		}
		if c := old.Containers[e.key]; c != nil {
			if c.Source.Raw != e.worker && !(c.IsPackage() && strings.HasPrefix(e.worker, "package://") && c.Source.Name == filepath.Base(e.worker)) {
				return nil, errcode.New(errcode.WorkerSourceChanged, "container '%s' is %s; compose::add would make it %s", e.key, c.Source.Raw, e.worker)
			}
			continue
		}
		entries = append(entries, e)
	}
	res := AddResult{Status: "ok", Added: []string{}}
	if len(entries) == 0 {
		return res, nil
	}
	var keys []string
	f, pkgs, err := d.mutate(ctx, nil, func(path string) error {
		for _, e := range entries {
			if err := d.Deps.AddContainer(path, e.key, e.worker, e.version); err != nil {
				return err
			}
			keys = append(keys, e.key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.Project.SetFile(f, pkgs)
	res.Added, res.Changed = keys, true
	step(ctx, "start containers")
	for _, k := range keys {
		up, err := d.Project.Up(ctx, k)
		res.Up = &up
		if err != nil {
			res.Status = "failed"
			for _, o := range up.Containers {
				if o.Error != nil {
					return res, errcode.New(o.Error.Code, "%s", o.Error.Message)
				}
			}
			return res, err
		}
	}
	return res, nil
}

// parseAdd reads one worker= value of compose::add.
func parseAdd(f *composefile.File, w string) (struct{ key, worker, version string }, error) {
	var e struct{ key, worker, version string }
	switch {
	case w == sandboxadapter.Alias:
		key := project.AdapterKey(f)
		if key == "" {
			key = sandboxadapter.Name
		}
		e.key, e.worker, e.version = key, sandboxadapter.Worker, sandboxadapter.CurrentRange()
	case strings.HasPrefix(w, ".") || strings.HasPrefix(w, "/"):
		dir := w
		if !filepath.IsAbs(dir) {
			wd, _ := os.Getwd()
			dir = filepath.Join(wd, dir)
		}
		rel, err := filepath.Rel(f.Dir, dir)
		if err != nil {
			rel = dir
		}
		if !strings.HasPrefix(rel, ".") && !filepath.IsAbs(rel) {
			rel = "./" + rel
		}
		e.key, e.worker = filepath.Base(dir), "path://"+filepath.ToSlash(rel)
	default:
		name, version, _ := strings.Cut(w, "@")
		if name == "" || strings.ContainsAny(name, " :") {
			return e, errcode.New(errcode.InvalidWorkerSpec, "cannot read worker=%q: write NAME, NAME@VERSION, HOST/NAME or ./DIR", w)
		}
		if version == "" {
			version = "latest"
		}
		e.key, e.worker, e.version = filepath.Base(name), "package://"+name, version
	}
	return e, nil
}

// RemoveResult is the reply of compose::remove.
type RemoveResult struct {
	Status   string   `json:"status"`
	Removed  []string `json:"removed"`
	Changed  bool     `json:"changed"`
	Warnings []string `json:"warnings,omitempty"`
}

// remove implements compose::remove: it stops each named container (a VM container's state is
// deleted through the adapter, req J4), deletes it and every reference to it from the file,
// and keeps the rest running.
func (d *Daemon) remove(ctx context.Context, r Request) (any, error) {
	if d.Deps.RemoveContainer == nil || d.Deps.Install == nil {
		return nil, notAvailable("compose::remove")
	}
	old := d.Project.File()
	var keys []string
	for _, w := range r.workers() {
		k := containerFor(old, w)
		if k == "" {
			return nil, errcode.New(errcode.UnknownContainer, "container '%s' is not in %s", w, old.Path)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errcode.New(errcode.InvalidWorkerSpec, "compose::remove needs worker=NAME")
	}
	var warnings []string
	step(ctx, "stop containers")
	for _, k := range keys {
		warnings = append(warnings, d.Project.RemoveContainer(ctx, k)...)
	}
	f, pkgs, err := d.mutate(ctx, nil, func(path string) error {
		for _, k := range keys {
			if err := d.Deps.RemoveContainer(path, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.Project.SetFile(f, pkgs)
	return RemoveResult{Status: "ok", Removed: keys, Changed: true, Warnings: warnings}, nil
}
