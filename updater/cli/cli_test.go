package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/iii-go/iii/updater/errcode"
	"github.com/iii-go/iii/updater/internal/treetest"
)

const triple = "x86_64-unknown-linux-gnu"

func TestGeneration(t *testing.T) {
	for v, legacy := range map[string]bool{"0.25.0": true, "0.25.3": true, "0.23.0-rc.4": true,
		"0.26.0": false, "0.26.0-rc.1": false, "0.27.1": false, "0.0.0-dev": false, "junk": false} {
		if got := !GenerationOf(v).Current(); got != legacy {
			t.Errorf("GenerationOf(%q) legacy = %v, want %v", v, got, legacy)
		}
	}
	old, cur := GenerationOf("0.25.0"), GenerationOf("0.26.0")
	for _, c := range []struct {
		g      Generation
		target string
		want   []string
		code   string
	}{
		{old, "", []string{"iii", "iii-init", "iii-worker"}, ""},
		{old, "worker", []string{"iii-worker"}, ""},
		{old, "self", []string{"iii"}, ""},
		{cur, "", []string{"iii"}, ""},
		{cur, "iii-cli", []string{"iii"}, ""},
		{cur, "iii-worker", nil, errcode.TargetRemoved},
		{cur, "init", nil, errcode.TargetRemoved},
		{cur, "console", nil, errcode.UnknownTarget},
	} {
		got, err := c.g.Select(c.target)
		if errcode.CodeOf(err) != c.code || !cmp.Equal(got, c.want) {
			t.Errorf("Select(%q) legacy=%v = %v, %v; want %v, %s", c.target, c.g.legacy, got, err, c.want, c.code)
		}
	}
	if got := old.forTarget([]string{"iii", "iii-init", "iii-worker"}, "aarch64-unknown-linux-musl"); !cmp.Equal(got, []string{"iii", "iii-init"}) {
		t.Errorf("forTarget musl arm = %v", got)
	}
}

func TestNewer(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"0.26.0", "0.25.0", true}, {"0.26.0", "0.26.0", false}, {"0.25.0", "0.26.0", false},
		{"0.26.0", "0.26.0-rc.1", true}, {"0.26.0", "", true}, {"x", "0.1.0", false}} {
		if got := Newer(c.a, c.b); got != c.want {
			t.Errorf("Newer(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

func TestArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string
		err  string
	}{
		{[]string{"--help"}, 0, "Usage: iii update", ""},
		{[]string{"--list-targets"}, 0, "Available targets for `iii update`:\n  self (or iii)\n", ""},
		{[]string{"--bogus"}, 2, "", "error[INVALID_ARGUMENTS]: unknown flag --bogus"},
		{[]string{"a", "b"}, 2, "", "error[INVALID_ARGUMENTS]: iii update takes at most one TARGET"},
		{[]string{"iii-worker"}, 2, "", "error[UPDATE_TARGET_REMOVED]: iii-worker is not part of iii since 0.26"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), "0.26.0", c.args, &out, &errb, os.Getenv)
		if code != c.code || !strings.HasPrefix(out.String(), c.out) || !strings.HasPrefix(errb.String(), c.err) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", c.args, code, out.String(), errb.String())
		}
	}
}

// setup gives the test a fake home, a release tree with 0.25.0 (iii, iii-init, iii-worker)
// and 0.26.0 (iii only), and returns the home.
func setup(t *testing.T) string {
	home := t.TempDir()
	root := filepath.Join(home, "dist")
	treetest.Write(t, root, "0.25.0", false,
		treetest.Binary{Name: "iii", Target: triple, Data: []byte("#!/bin/sh\necho 0.25.0\n")},
		treetest.Binary{Name: "iii-init", Target: triple, Data: []byte("#!/bin/sh\necho 0.25.0\n")},
		treetest.Binary{Name: "iii-worker", Target: triple, Data: []byte("#!/bin/sh\necho 0.25.0\n")})
	treetest.Write(t, root, "0.26.0", true,
		treetest.Binary{Name: "iii", Target: triple, Data: []byte("#!/bin/sh\necho 0.26.0\n")})
	t.Setenv("HOME", home)
	t.Setenv("BIN_DIR", "")
	t.Setenv("III_TARGET", triple)
	t.Setenv("III_RELEASE_URL", "file://"+root)
	t.Setenv("PATH", filepath.Join(home, ".local", "bin")+":/usr/bin:/bin")
	return home
}

func TestLegacyUpdateInstallsIiiThenMissesCompanions(t *testing.T) {
	home := setup(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), "0.25.0", nil, &out, &errb, os.Getenv)
	want := `  Checking all binaries for updates...
  Checking for updates to iii...
  Updating iii to v0.26.0...
  ✓ iii updated: 0.25.0 → 0.26.0
  note: iii has been updated. Restart your shell or run the command again to use the new version.
  Checking for updates to iii-init...
  error: Release asset not found for platform x86_64-unknown-linux-gnu: iii-init
  Checking for updates to iii-worker...
  error: Release asset not found for platform x86_64-unknown-linux-gnu: iii-worker
`
	if code != 1 || errb.String() != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", code, errb.String(), want)
	}
	b, err := os.ReadFile(filepath.Join(home, ".local", "bin", "iii"))
	if err != nil || !strings.Contains(string(b), "0.26.0") {
		t.Errorf("installed iii: %q, %v", b, err)
	}
}

func TestCurrentUpdateIsCleanAndListsLeftovers(t *testing.T) {
	home := setup(t)
	bin := filepath.Join(home, ".local", "bin")
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "iii"), []byte("#!/bin/sh\necho 0.26.0\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "iii-worker"), []byte("#!/bin/sh\necho 0.25.0\n"), 0o755)
	os.MkdirAll(filepath.Join(home, ".iii", "pids"), 0o755)
	var out, errb bytes.Buffer
	code := run(context.Background(), "0.26.0", nil, &out, &errb, os.Getenv)
	want := strings.ReplaceAll(`  Checking all binaries for updates...
  Checking for updates to iii...
  ✓ iii is already up to date (v0.26.0)
  iii 0.26 no longer uses these files left by 0.25. Nothing was deleted; remove them yourself:
    H/.local/bin/iii-worker  (the 0.25 iii-worker binary)
    H/.iii/pids/  (iii-worker's PID files)
    rm H/.local/bin/iii-worker
    rm -r H/.iii/pids
  Keep the rest of H/.iii/lib/ and H/.iii/cache/: sandbox-libkrun still uses them.
`, "H", home)
	if code != 0 || errb.String() != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", code, errb.String(), want)
	}
	if _, err := os.Stat(filepath.Join(bin, "iii-worker")); err != nil {
		t.Errorf("iii-worker deleted: %v", err)
	}
}
