package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/Masterminds/semver/v3"

	"github.com/iii-go/iii/compose/composefile"
	composeerr "github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/fileedit"
	"github.com/iii-go/iii/compose/lock"
	"github.com/iii-go/iii/compose/prepare"
	"github.com/iii-go/iii/compose/project"
	"github.com/iii-go/iii/compose/sandboxadapter"
	"github.com/iii-go/iii/compose/state"
	"github.com/iii-go/iii/compose/token"
	"github.com/iii-go/iii/engine/config"
	"github.com/iii-go/iii/internal/base/errcode"
)

// projectInfo is what the project checks learned, for the host and engine checks.
type projectInfo struct {
	f       *composefile.File
	adapter prepare.Adapter
	// adapterEnv is the adapter container's environment: Compose hands it to the adapter, whose
	// host checks read it.
	adapterEnv map[string]string
	// platformCode is UNSUPPORTED_PLATFORM once prepare reported it from the lock.
	platformCode string
	// accelerator is the adapter's accelerator as Compose would start it: the container's
	// III_SANDBOX_ACCELERATOR, else config_override's accelerator, else "" (the default, kvm).
	accelerator string
	// noStateDisk: config_override sets worker_disk_mb to 0, so VM workers need no mkfs.ext4.
	noStateDisk bool
}

func (p *projectInfo) needsAdapter() bool {
	return p != nil && p.f != nil && (p.adapter.Needed != "" || p.adapter.Container != "")
}

// checkProject reads the compose file, its lock and its state directories.
func checkProject(r *Report, o Options) *projectInfo {
	p := &projectInfo{}
	if o.ComposeFile == "" {
		r.note("no compose file: none named with -f and no worker-compose.yaml in the current directory, so the project checks were skipped")
		return p
	}
	path := o.ComposeFile
	checkOldVMState(r, path, o.getenv(state.EnvStateDir))
	data, err := os.ReadFile(path)
	if err != nil {
		r.add(Finding{Code: composeerr.IOError, Severity: Error, Path: path, Message: err.Error(), Fix: "make the file readable"})
		return p
	}
	f, err := composefile.Parse(path, data, o.LookupEnv)
	if composeerr.CodeOf(err) == composeerr.SandboxConfigMoved {
		f = movedFinding(r, path, data, err, o.LookupEnv)
	} else if err != nil {
		e := composeerr.As(err, composeerr.InvalidComposeFile)
		r.add(Finding{Code: e.Code, Severity: Error, Path: path, Message: e.Message,
			Fix: "edit the file as the message says; iii compose --up refuses it until then"})
	}
	if f == nil {
		return p
	}
	p.f = f
	l, err := lock.Read(lock.PathFor(f.Path))
	if err != nil {
		l = nil
		if !errors.Is(err, fs.ErrNotExist) {
			e := composeerr.As(err, composeerr.InvalidComposeLock)
			r.add(Finding{Code: e.Code, Severity: Error, Path: lock.PathFor(f.Path), Message: e.Message,
				Fix: "delete it and run `iii compose build` to write a new one"})
		}
	}
	a, errs := prepare.Check(f, l, *o.Target)
	p.adapter = a
	for _, err := range errs {
		e := composeerr.As(err, composeerr.InvalidComposeFile)
		fd := Finding{Code: e.Code, Severity: Error, Path: f.Path, Message: e.Message, Fix: "as the message says"}
		switch e.Code {
		case composeerr.SandboxAdapterNotDeclared:
			// Only --frozen fails: a plain `iii compose --up` adds the adapter itself (req F2, F3).
			fd.Severity = Warning
			fd.Fix = "run `iii compose --up` once without --frozen, then commit both files, as the message says"
		case composeerr.UnsupportedPlatform:
			p.platformCode = e.Code
			fd.Fix = "run the project on one of the hosts the message lists"
		}
		r.add(fd)
	}
	if a.Container != "" {
		c := f.Containers[a.Container]
		p.adapterEnv = c.Environment
		p.accelerator, _ = c.ConfigOverride["accelerator"].(string)
		if v, ok := c.ConfigOverride["worker_disk_mb"]; ok && fmt.Sprint(v) == "0" {
			p.noStateDisk = true
		}
		if v := c.Environment["III_SANDBOX_ACCELERATOR"]; v != "" {
			p.accelerator = v
		}
	}
	checkAdapterVersion(r, f, l, a, o.getenv(state.EnvStateDir))
	return p
}

// movedFinding reports SANDBOX_CONFIG_MOVED with Compose's own message, which prints the
// replacement (req B1, B2), and returns the file as `iii doctor --fix` would write it, so the
// other checks can go on; nil when the fix cannot be applied.
func movedFinding(r *Report, path string, data []byte, err error, lookupEnv func(string) (string, bool)) *composefile.File {
	fd := Finding{Code: composeerr.SandboxConfigMoved, Severity: Error, Path: path, Message: composeerr.As(err, "").Message}
	var f *composefile.File
	doc, derr := fileedit.Parse(path, data)
	if derr == nil {
		_, derr = doc.MoveSandboxConfig()
	}
	var fixed []byte
	if derr == nil {
		fixed, derr = doc.Bytes()
	}
	if derr == nil {
		f, derr = composefile.Parse(path, fixed, lookupEnv)
	}
	if derr == nil {
		fd.Fix = "run iii doctor --fix, which writes that replacement into the file (comments and other keys kept), or merge it by hand"
		fd.Fixable = true
		r.note("the other project checks read " + path + " as iii doctor --fix would write it")
	} else {
		fd.Fix = "edit the file by hand as the message says: " + composeerr.As(derr, "").Message
		f = nil
	}
	r.add(fd)
	return f
}

// on02 reports whether a version selector keeps the adapter on 0.2: it admits some 0.2.x and no
// 0.3.x (req B7).
func on02(selector string) bool {
	c, err := semver.NewConstraint(selector)
	if err != nil {
		return false
	}
	for _, v := range []string{"0.3.0", "0.3.1", "0.3.99"} {
		if c.Check(semver.MustParse(v)) {
			return false
		}
	}
	for _, v := range []string{"0.2.0", "0.2.1", "0.2.2", "0.2.3", "0.2.99"} {
		if c.Check(semver.MustParse(v)) {
			return true
		}
	}
	return false
}

func lockedOn02(v string) bool {
	sv, err := semver.NewVersion(v)
	return err == nil && sv.Major() == 0 && sv.Minor() == 2
}

// checkAdapterVersion reports an adapter declared or locked on 0.2 (req B7, B8, B9) and a token
// that a path:// VM worker could read under an adapter before 0.3.1 (req B10).
func checkAdapterVersion(r *Report, f *composefile.File, l *lock.Lock, a prepare.Adapter, stateDir string) {
	if a.Container == "" {
		return
	}
	c := f.Containers[a.Container]
	name := sandboxadapter.Name
	if c.IsPackage() {
		name = c.Source.Name
	}
	locked := ""
	if l != nil {
		if e, ok := l.Containers[a.Container]; ok {
			locked = e.Resolved.Version
		}
	}
	where := fmt.Sprintf("%s:containers.%s.version", f.Path, a.Container)
	if c.IsPackage() && (on02(c.Version) || lockedOn02(locked)) {
		v := locked
		if v == "" {
			v = c.Version
		}
		msg := fmt.Sprintf("container '%s' declares %s at version '%s'", a.Container, name, c.Version)
		if locked != "" {
			msg += fmt.Sprintf(" (locked: %s)", locked)
		}
		msg += fmt.Sprintf(": it stays on 0.2 across compose::up, compose::restart and compose::update worker=%s, and %s", a.Container, token.ObserversProblem(name, v))
		r.add(Finding{Code: AdapterRange02, Severity: Warning, Path: where, Message: msg, Fix: token.RangeFix})
	}
	sd, err := state.Resolve(f.Path, f.Namespace, stateDir)
	reported := map[string]bool{}
	if locked != "" && token.VMMountsExpose(locked) {
		for _, k := range project.ExposingWorkers(f) {
			reported[k] = true
			r.add(Finding{Code: TokenExposed, Severity: Error, Path: fmt.Sprintf("%s:containers.%s", f.Path, k),
				Message: token.ExposedProblem(name, locked, k), Fix: "stop Compose, then: " + token.ExposedFix(name)})
		}
	}
	if err != nil {
		return
	}
	if e, ok, _ := token.Exposed(sd.Path); ok && !reported[e.Container] {
		r.add(Finding{Code: TokenExposed, Severity: Error, Path: token.Path(sd.Path),
			Message: fmt.Sprintf("%s; the project's state records that it ran, and the token was not replaced since", token.ExposedProblem(name, e.AdapterVersion, e.Container)),
			Fix:     "stop Compose, then: " + token.ExposedFix(name)})
	}
}

// checkOldVMState reports each <state dir>/vm/<key>/ of the project, under the compose
// directory and under $III_COMPOSE_STATE_DIR, for any namespace (req J1). It follows no symbolic
// link below the project's directory or $III_COMPOSE_STATE_DIR: a link on the way (.iii,
// compose, the namespace, vm, an entry of vm) that leads to such state is reported instead, as
// SYMLINK_NOT_FOLLOWED.
func checkOldVMState(r *Report, composePath, stateDir string) {
	canon, err := state.Canonical(composePath)
	if err != nil {
		return
	}
	type tree struct{ root, base string }
	dir := filepath.Dir(canon)
	trees := []tree{{dir, filepath.Join(dir, ".iii", "compose")}}
	if root := stateDir; root != "" {
		if abs, err := filepath.Abs(root); err == nil {
			trees = append(trees, tree{abs, filepath.Join(abs, state.Slug(canon))})
		}
	}
	const what = "0.25 VM state (<state dir>/vm/<key>/)"
	var found []Finding
	link := func(p, root string) { found = append(found, linkFinding(p, root, what)) }
	for _, t := range trees {
		if l, err := firstLink(t.root, t.base); err != nil {
			continue
		} else if l != "" {
			if vmStateBehind(t.base, 2) {
				link(l, t.root)
			}
			continue
		}
		nss, _ := os.ReadDir(t.base)
		for _, ns := range nss {
			nsDir := filepath.Join(t.base, ns.Name())
			if isLink(ns) {
				if vmStateBehind(nsDir, 1) {
					link(nsDir, t.root)
				}
				continue
			}
			vm := filepath.Join(nsDir, state.LegacyVMDir)
			st, err := os.Lstat(vm)
			switch {
			case err != nil:
				continue
			case st.Mode()&fs.ModeSymlink != 0:
				if vmStateBehind(vm, 0) {
					link(vm, t.root)
				}
				continue
			case !st.IsDir():
				continue
			}
			ents, _ := os.ReadDir(vm)
			for _, e := range ents {
				d := filepath.Join(vm, e.Name())
				if isLink(e) {
					if st, err := os.Stat(d); err == nil && st.IsDir() {
						link(d, t.root)
					}
					continue
				}
				if !e.IsDir() {
					continue
				}
				n := size(d)
				found = append(found, Finding{Code: OldVMState, Severity: Warning, Path: d + string(filepath.Separator), Size: n,
					Message: fmt.Sprintf("0.25 kept the state of VM worker '%s' of namespace '%s' here (%s); nothing in 0.26 reads <state dir>/vm/, and the worker's first 0.26 boot starts from fresh state", e.Name(), ns.Name(), human(n)),
					Fix:     removeCommand(d, true) + fixByMove, Fixable: true, movable: true, root: t.root})
			}
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Path < found[j].Path })
	for _, f := range found {
		r.add(f)
	}
}

// checkConfig reads config.yaml with the engine's own parser (req E8).
func checkConfig(r *Report, o Options) *config.Config {
	if o.ConfigFile == "" {
		return nil
	}
	c, err := config.Load(o.ConfigFile, o.LookupEnv)
	if err == nil {
		return c
	}
	var ce *errcode.Error
	if errors.As(err, &ce) {
		r.add(Finding{Code: ce.Code, Severity: Error, Path: o.ConfigFile, Message: ce.Message,
			Fix: "edit " + o.ConfigFile + " as the message says; the engine refuses to start with it until then"})
	} else {
		r.add(Finding{Code: composeerr.IOError, Severity: Error, Path: o.ConfigFile, Message: err.Error(), Fix: "make the file readable"})
	}
	return nil
}
