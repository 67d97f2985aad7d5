package testscripts

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/release"
	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	registerBinary(binary{name: "iii-0.25", pkg: ".", version: oldVersion})
	registerCmd("releasetree", cmdReleaseTree)
	registerCmd("serverelease", cmdServeRelease)
	registerCmd("corrupt", cmdCorrupt)
	registerCmd("lstree", cmdLsTree)
}

// oldVersion is the 0.25 release the scenarios upgrade from.
const oldVersion = "0.25.0"

// releaseTree is the path of a release tree built once per test run for the host target, and
// the version of its latest release.
type releaseTree struct{ dir, latest, triple string }

var buildTreeOnce = sync.OnceValues(buildReleaseTree)

// buildReleaseTree publishes, for the host target only, 0.25.0 (iii built as 0.25.0 plus small
// fake iii-worker and iii-init assets, as 0.25 shipped them) and the current version (iii only),
// each with install.sh, and points iii/latest at the current version.
func buildReleaseTree() (releaseTree, error) {
	triple := platform.Host(os.Getenv).Triple
	t, ok := release.FindTarget(triple)
	if !ok {
		return releaseTree{}, fmt.Errorf("host target %s is not in release.Targets", triple)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		return releaseTree{}, err
	}
	latest := strings.TrimSpace(string(raw))
	dist := filepath.Join(filepath.Dir(binDir), filepath.Base(binDir)+"-release")
	installSh := filepath.Join(repoRoot, "updater", "install.sh")
	fakes := filepath.Join(dist, ".fakes")
	if err := os.MkdirAll(fakes, 0o755); err != nil {
		return releaseTree{}, err
	}
	publish := func(version string, bins map[string]string) error {
		dir := release.Dir(dist, version)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var assets []release.Asset
		for product, bin := range bins {
			a, err := release.PackageBinary(dir, product, version, t, bin)
			if err != nil {
				return err
			}
			assets = append(assets, a)
		}
		a, err := release.PublishFile(dir, version, installSh)
		if err != nil {
			return err
		}
		_, err = release.WriteIndex(dir, version, append(assets, a))
		return err
	}
	old := map[string]string{"iii": filepath.Join(binDir, "iii-0.25")}
	for _, name := range []string{"iii-worker", "iii-init"} {
		p := filepath.Join(fakes, name)
		script := fmt.Sprintf("#!/bin/sh\necho %s %s\n", name, oldVersion)
		if err := writeProgram(p, []byte(script), 0o755); err != nil {
			return releaseTree{}, err
		}
		old[name] = p
	}
	if err := publish(oldVersion, old); err != nil {
		return releaseTree{}, err
	}
	if err := publish(latest, map[string]string{"iii": filepath.Join(binDir, "iii")}); err != nil {
		return releaseTree{}, err
	}
	if err := os.RemoveAll(fakes); err != nil {
		return releaseTree{}, err
	}
	if err := os.WriteFile(filepath.Join(dist, "iii", "latest"), []byte(latest+"\n"), 0o644); err != nil {
		return releaseTree{}, err
	}
	return releaseTree{dir: dist, latest: latest, triple: triple}, nil
}

// releasetree DIR: copy the run's release tree (0.25.0 and the current version, host target
// only) into DIR and set III_RELEASE_URL=file://DIR, TRIPLE (the host target), OLD_VERSION
// and NEW_VERSION.
func cmdReleaseTree(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: releasetree DIR")
	}
	tree, err := buildTreeOnce()
	ts.Check(err)
	dst := ts.MkAbs(args[0])
	ts.Check(copyTree(tree.dir, dst))
	ts.Setenv("III_RELEASE_URL", "file://"+dst)
	ts.Setenv("TRIPLE", tree.triple)
	ts.Setenv("OLD_VERSION", oldVersion)
	ts.Setenv("NEW_VERSION", tree.latest)
}

// copyTree copies the regular files and directories under src into dst, modes kept.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, info.Mode().Perm())
	})
}

// serverelease DIR LOG: serve DIR over http on 127.0.0.1 until the script ends, set
// III_RELEASE_URL to it, and append the path of every request to the file LOG.
func cmdServeRelease(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: serverelease DIR LOG")
	}
	dir, logPath := ts.MkAbs(args[0]), ts.MkAbs(args[1])
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	ts.Check(err)
	var mu sync.Mutex
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fmt.Fprintln(logf, r.URL.Path)
		mu.Unlock()
		files.ServeHTTP(w, r)
	}))
	ts.Defer(func() {
		srv.Close()
		logf.Close()
	})
	ts.Setenv("III_RELEASE_URL", srv.URL)
}

// corrupt FILE: flip one byte in the middle of FILE, keeping its size.
func cmdCorrupt(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: corrupt FILE")
	}
	p := ts.MkAbs(args[0])
	data, err := os.ReadFile(p)
	ts.Check(err)
	if len(data) == 0 {
		ts.Fatalf("corrupt: %s is empty", p)
	}
	data[len(data)/2] ^= 0xff
	ts.Check(os.WriteFile(p, data, 0o644))
}

// lstree DIR...: print every path under each DIR, sorted, one per line as "<kind> <perm> <path>"
// with kind d (directory), f (file) or l (symbolic link) and paths relative to DIR's parent.
// File contents are not shown, so a replaced binary lists the same.
func cmdLsTree(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: lstree DIR...")
	}
	var lines []string
	for _, a := range args {
		root := ts.MkAbs(a)
		base := filepath.Dir(root)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			kind := "f"
			switch {
			case d.IsDir():
				kind = "d"
			case info.Mode()&fs.ModeSymlink != 0:
				kind = "l"
			}
			rel, _ := filepath.Rel(base, p)
			lines = append(lines, fmt.Sprintf("%s %04o %s", kind, info.Mode().Perm(), filepath.ToSlash(rel)))
			return nil
		})
		ts.Check(err)
	}
	sort.Strings(lines)
	w := bufio.NewWriter(ts.Stdout())
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	ts.Check(w.Flush())
}
