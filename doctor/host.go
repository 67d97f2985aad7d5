package doctor

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/hostreq"
	"github.com/iii-go/iii/updater/leftover"
	"github.com/iii-go/iii/updater/shadow"
)

// self is the name of iii's binary.
const self = "iii"

// fixByMove is appended to the fix of a leftover that --fix moves aside.
const fixByMove = " (or run iii doctor --fix, which moves it into ~/.iii/trash/ instead)"

func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}

// checkBinaries reports iii-worker and iii-init beside the iii that runs and in the install
// directory (req I3), and an iii on PATH that is not the installed one (req I2).
func checkBinaries(ctx context.Context, r *Report, o Options) {
	var dirs []string
	if o.Exe != "" {
		dirs = append(dirs, filepath.Dir(o.Exe))
	}
	dirs = append(dirs, o.BinDir)
	seen := map[string]bool{}
	for _, d := range dirs {
		d = filepath.Clean(d)
		if seen[d] {
			continue
		}
		seen[d] = true
		for _, it := range leftover.FindBinaries(d, exeSuffix()) {
			r.add(Finding{Code: LeftoverBinary, Severity: Warning, Path: it.Path,
				Message: it.About + ": iii 0.26 ships neither iii-worker nor iii-init, and nothing runs it",
				Fix:     removeCommand(it.Path, it.Dir) + fixByMove, Fixable: true, movable: true})
		}
	}
	installed := filepath.Join(o.BinDir, self+exeSuffix())
	if _, err := os.Stat(installed); err != nil {
		return
	}
	s, ok := shadow.Find(self, installed)
	if !ok {
		return
	}
	msg := s.Warning(installed, shadow.Version(ctx, s.Path))
	if v := shadow.Version(ctx, installed); v != "" {
		msg += fmt.Sprintf(" %s is %s.", installed, v)
	}
	r.add(Finding{Code: PathShadow, Severity: Warning, Path: s.Path, Message: msg, Fix: s.Fix(o.BinDir)})
}

// checkHomeLeftovers reports each of iii-worker's paths under ~/.iii that exists, with its size
// (req J2), and never the rest of ~/.iii/lib/ or ~/.iii/cache/. A symbolic link below ~/.iii on
// the way to one (~/.iii/managed itself, ~/.iii/cache of cache/bundles) is reported instead, as
// SYMLINK_NOT_FOLLOWED: what it leads to lies outside ~/.iii.
func checkHomeLeftovers(r *Report, o Options) {
	root := filepath.Join(o.Home, ".iii")
	n := 0
	for _, it := range leftover.FindHome(o.Home) {
		link, err := firstLink(root, it.Path)
		if err != nil {
			continue
		}
		if link != "" {
			r.addLink(link, root, "iii-worker's leftovers")
			continue
		}
		n++
		r.add(Finding{Code: LeftoverPath, Severity: Warning, Path: it.Display(), Size: size(it.Path),
			Message: fmt.Sprintf("%s (%s): sandbox-libkrun reads none of it", it.About, human(size(it.Path))),
			Fix:     removeCommand(it.Path, it.Dir) + fixByMove, Fixable: true, movable: true, root: root})
	}
	if n > 0 {
		r.note(leftover.KeepNote(o.Home))
	}
}

// checkHost runs the adapter's host checks (req H2, H3) when the project needs the adapter or
// --host asks for them, with the environment Compose gives the adapter container.
func checkHost(r *Report, o Options, p *projectInfo) {
	if !o.Host && !p.needsAdapter() {
		if p.f != nil {
			r.note("the project does not need the sandbox adapter, so the host checks were skipped (--host runs them)")
		}
		return
	}
	env := hostreq.Env{Home: o.Home, Getenv: func(k string) string {
		if v, ok := p.adapterEnv[k]; ok {
			return v
		}
		return o.getenv(k)
	}}
	problems := hostreq.Run(env, *o.Target, p.accelerator)
	// VM workers' state disks (worker_disk_mb, on by default) need mkfs.ext4 on every host the
	// adapter runs on; the adapter refuses to start without it, so doctor says so first.
	if p.f == nil || !p.noStateDisk {
		if pr := hostreq.Mkfs(env); pr != nil && hostreq.Platform(*o.Target) == nil {
			problems = append(problems, *pr)
		}
	}
	for _, pr := range problems {
		if pr.Code == p.platformCode {
			continue
		}
		f := Finding{Code: pr.Code, Severity: Error, Path: pr.Path, Message: pr.Message, Fix: pr.Fix}
		if pr.Code == errcode.FirmwareMissing {
			// The adapter package carries its firmware and installs it at start.
			f.Severity = Info
			f.Fix = "nothing to do before the adapter's first start: sandbox-libkrun installs the firmware its package carries into " + filepath.Dir(pr.Path) + " when it starts (`iii compose --up`)"
		}
		r.add(f)
	}
}

// size is the number of bytes in the regular files under path (path itself when a file).
func size(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// human renders a byte count: 512 B, 1.5 KiB, 3.2 MiB, ...
func human(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if f < 1024 {
			break
		}
		f, unit = f/1024, u
	}
	return fmt.Sprintf("%.1f %s", f, unit)
}
