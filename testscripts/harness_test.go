// Package testscripts is the end-to-end suite: one folder of testscript scenarios per area, run
// against the real built binaries (see README.md here for the harness and its commands).
package testscripts

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/hostsetup"
	"github.com/iii-go/iii/internal/release"
)

// binary is one program the scenarios run, built once per test run.
type binary struct {
	name    string // file name on PATH
	pkg     string // package path relative to the repository root, e.g. "." or "./sandbox-libkrun"
	version string // version injected as main.version; empty reads versionFile
	vfile   string // VERSION file relative to the repository root
	tags    string // build tags
}

var (
	binaries   []binary
	customCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){}
	conditions = map[string]func() (bool, error){}
	setups     []func(env *testscript.Env) error
)

// registerBinary adds a program to build for the scenarios. Call it from init.
func registerBinary(b binary) { binaries = append(binaries, b) }

// registerCmd adds a custom testscript command. Call it from init; document it in README.md.
func registerCmd(name string, fn func(ts *testscript.TestScript, neg bool, args []string)) {
	if _, dup := customCmds[name]; dup {
		panic("duplicate testscript command " + name)
	}
	customCmds[name] = fn
}

// registerCond adds a custom condition such as [vm]. Call it from init.
func registerCond(name string, fn func() (bool, error)) { conditions[name] = fn }

// registerSetup adds a step run for every script after the common set-up. Call it from init.
func registerSetup(fn func(env *testscript.Env) error) { setups = append(setups, fn) }

// Every product of the release (iii, the adapter, the event workers) is built as the release
// builds it, under the name Compose runs it by.
func init() {
	for _, p := range release.Products {
		registerBinary(binary{name: p.Name, pkg: p.Package, vfile: p.VersionFile})
	}
}

var (
	repoRoot string // absolute path of the repository root
	binDir   string // directory holding every built binary
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	tmp, err := os.MkdirTemp("", "iii-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	binDir = tmp
	if err := buildBinaries(os.Getenv("III_TEST_BIN"), binDir); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries under test:", err)
		return 1
	}
	if _, why := hostsetup.Accelerator(); vmReason() == "" {
		fmt.Printf("VM scenarios: %s\n", why)
	} else {
		fmt.Printf("VM scenarios cannot run here: %s\n", vmReason())
	}
	return m.Run()
}

// buildBinaries builds every registered binary into dir, or links it from prebuilt when that
// directory already holds a file of the same name. A built sandbox-libkrun carries the VM
// firmware of dist/firmware/<host target> (a link in dir), as a released one does, and that of
// the other guest architecture in firmware-<arch> (for guest_arch under emulation).
func buildBinaries(prebuilt, dir string) error {
	for _, triple := range release.FirmwareTriples() {
		name := release.FirmwareDir
		if triple != platform.Host(os.Getenv).Triple {
			arch, _, _ := strings.Cut(triple, "-")
			name += "-" + arch
		}
		fw := filepath.Join(repoRoot, "dist", "firmware", triple)
		if _, err := os.Stat(fw); err == nil {
			if err := os.Symlink(fw, filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	for _, b := range binaries {
		out := filepath.Join(dir, b.name)
		if prebuilt != "" {
			if src, err := filepath.Abs(filepath.Join(prebuilt, b.name)); err == nil {
				if _, err := os.Stat(src); err == nil {
					if err := os.Symlink(src, out); err != nil {
						return err
					}
					continue
				}
			}
		}
		v := b.version
		if v == "" {
			raw, err := os.ReadFile(filepath.Join(repoRoot, b.vfile))
			if err != nil {
				return err
			}
			v = strings.TrimSpace(string(raw))
		}
		args := []string{"build", "-trimpath", "-ldflags", "-s -w -X main.version=" + v, "-o", out}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		args = append(args, b.pkg)
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.name, err, stderr.String())
		}
	}
	return nil
}

// TestScripts runs every folder under testscripts/ as its own parallel group of scenarios.
// Select one with: go test ./testscripts -run 'TestScripts/<folder>/<script>'.
func TestScripts(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "internal" && e.Name() != "testdata" {
			dirs = append(dirs, e.Name())
		}
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			testscript.Run(t, params(dir))
		})
	}
}

// hostEnv are variables copied from the test's environment into every script, so that a script
// that runs `go` shares the host's module and build caches.
var hostEnv = []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOPROXY", "GONOSUMDB", "GOTOOLCHAIN", "CI", "LANG"}

var goEnvOnce = sync.OnceValues(func() (map[string]string, error) {
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return map[string]string{"GOCACHE": lines[0], "GOMODCACHE": lines[1], "GOPATH": lines[2]}, nil
})

func params(dir string) testscript.Params {
	return testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup:               setup,
		Cmds:                customCmds,
		Condition: func(cond string) (bool, error) {
			if fn, ok := conditions[cond]; ok {
				return fn()
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	}
}

// setup gives each script a fake HOME under $WORK, the binaries under test first on PATH, no
// inherited III_* variables (the script environment starts empty), and a few paths it may need.
func setup(env *testscript.Env) error {
	home := filepath.Join(env.WorkDir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	env.Setenv("HOME", home)
	env.Setenv("USER", "tester")
	env.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	env.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	env.Setenv("XDG_DATA_HOME", filepath.Join(home, ".local", "share"))
	env.Setenv("PATH", binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	env.Setenv("REPO", repoRoot)
	env.Setenv("FIXTURES", filepath.Join(repoRoot, "fixtures"))
	env.Setenv("BIN", binDir)
	goenv, err := goEnvOnce()
	if err != nil {
		return err
	}
	for _, k := range hostEnv {
		if v := os.Getenv(k); v != "" {
			env.Setenv(k, v)
		} else if v := goenv[k]; v != "" {
			env.Setenv(k, v)
		}
	}
	for _, fn := range setups {
		if err := fn(env); err != nil {
			return err
		}
	}
	return nil
}
