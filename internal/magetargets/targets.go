// Package magetargets holds the mage targets of the repository (build, release, test, demo,
// bench, lint): magefiles/magefile.go imports them with // mage:import, so `go tool mage -l`
// lists them, and go vet and go test see them as an ordinary package.
package magetargets

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/hostsetup"
	"github.com/iii-go/iii/internal/release"
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Build builds iii and sandbox-libkrun for this host into bin/, and points bin/firmware at the
// VM firmware the adapter carries (and bin/firmware-<arch> at the other guest architecture's)
// when `go tool mage firmware` has built it.
func Build(ctx context.Context) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	host := release.Target{GOOS: goEnv("GOOS"), GOARCH: goEnv("GOARCH")}
	for _, p := range release.Products {
		v, err := release.ReadVersion(root, p)
		if err != nil {
			return err
		}
		out := filepath.Join("bin", host.Exe(p.Name))
		if err := release.BuildBinary(ctx, root, p, host, v, out); err != nil {
			return err
		}
		fmt.Printf("built %s %s\n", out, v)
	}
	return linkFirmware("bin")
}

// linkFirmware makes bin/firmware a symbolic link to the host target's firmware build and
// bin/firmware-<arch> one to the firmware of each other guest architecture (which the adapter
// installs for guest_arch under emulation), or removes a link whose build is missing.
func linkFirmware(bin string) error {
	_, dist, err := rootAndDist()
	if err != nil {
		return err
	}
	for _, triple := range release.FirmwareTriples() {
		name := release.FirmwareDir
		if triple != platform.Host(os.Getenv).Triple {
			arch, _, _ := strings.Cut(triple, "-")
			name += "-" + arch
		}
		if err := link(filepath.Join(dist, "firmware", triple), filepath.Join(bin, name)); err != nil {
			return err
		}
	}
	return nil
}

// link makes link a symbolic link to dir, or removes it when dir does not exist.
func link(dir, link string) error {
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		return err
	}
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	return os.Symlink(dir, link)
}

// Release cross-compiles every target into dist/iii/v<version>/ with checksums and a manifest,
// then publishes the adapter into the worker registry dist/registry/. Each adapter archive
// carries the VM firmware of its guest architecture (built first): x86_64 Linux the x86_64
// firmware, aarch64 Linux and Apple Silicon the aarch64 one.
func Release(ctx context.Context) error {
	mg.CtxDeps(ctx, Firmware)
	root, dist, err := rootAndDist()
	if err != nil {
		return err
	}
	fw := map[string]string{}
	for _, t := range release.Targets {
		fw[t.Triple] = filepath.Join(dist, "firmware", t.FirmwareTriple())
	}
	m, err := release.Run(ctx, release.Options{Root: root, Dist: dist, Jobs: 2, Log: os.Stdout, Extra: []string{"updater/install.sh"},
		Firmware: fw})
	if err != nil {
		return err
	}
	fmt.Printf("release %s: %d assets in %s\n", m.Version, len(m.Assets), release.Dir(dist, m.Version))
	return Registry()
}

// rootAndDist returns the repository root (the directory mage runs in) and the dist directory:
// $III_DIST_DIR, else <root>/dist.
func rootAndDist() (root, dist string, err error) {
	if root, err = os.Getwd(); err != nil {
		return "", "", err
	}
	if dist = os.Getenv("III_DIST_DIR"); dist == "" {
		dist = filepath.Join(root, "dist")
	}
	return root, dist, nil
}

// Test installs what the suite needs (Setup), then runs the linters, every module's unit tests,
// the packages of racy again under the race detector, the fuzz targets of fuzzTargets for
// its budget each, and the end-to-end suite against bin/.
func Test(ctx context.Context) error {
	mg.SerialCtxDeps(ctx, Setup, Lint, Build)
	for _, m := range modules {
		pkgs, err := unitPackages(m)
		if err != nil {
			return err
		}
		if err := inDir(m, "go", append([]string{"test", "-count=1"}, pkgs...)...); err != nil {
			return err
		}
		if racy[m] != nil {
			// -short: the few tests that move bulk frames skip; the plain run above has them.
			if err := inDir(m, "go", append([]string{"test", "-count=1", "-race", "-short"}, racy[m]...)...); err != nil {
				return err
			}
		}
	}
	if err := Fuzz(ctx); err != nil {
		return err
	}
	bin, err := filepath.Abs("bin")
	if err != nil {
		return err
	}
	_, why := hostsetup.Accelerator()
	fmt.Printf("==> end-to-end suite; VM scenarios: %s\n", why)
	return sh.RunWithV(map[string]string{"III_TEST_BIN": bin},
		"go", "test", "-count=1", "-timeout", "45m", "./testscripts")
}

// racy are, per module, the packages whose unit tests run again under the race detector: the
// engine's router, the SDK, the frame codec and the WebSocket layer (pooled, borrowed buffers on
// the hot path), Compose's daemon and the workers.
var racy = map[string][]string{
	"engine":  {"./core", "./protocol", "./internal/wire", "./internal/batchconn"},
	"compose": {"./daemon"},
	"workers": {"./..."},
}

// unitPackages lists module m's packages: "./..." but for the root's e2e package, which runs
// last, against the fresh binaries.
func unitPackages(m string) ([]string, error) {
	if m != "." {
		return []string{"./..."}, nil
	}
	out, err := sh.Output("go", "list", "./...")
	if err != nil {
		return nil, err
	}
	var pkgs []string
	for _, p := range strings.Fields(out) {
		if !strings.HasSuffix(p, "/testscripts") {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs, nil
}

// fuzzTargets are the fuzz targets Fuzz runs: module, package, target name and budget. The
// budgets are counts of inputs (about 10 s each on this project's 2-core machines), not
// durations: Go 1.26's fuzz coordinator can fail a target with a bare "context deadline
// exceeded" when a -fuzztime duration ends under load (golang/go#75804, fixed in Go 1.27); a
// count has no deadline to race.
var fuzzTargets = []struct{ module, pkg, name, budget string }{
	{"engine", "./internal/batchconn", "FuzzReadMessage", "200000x"},
	{"engine", "./internal/wire", "FuzzDecode", "100000x"},
	{"compose", "./composefile", "FuzzParse", "100000x"},
	{"compose", "./composefile", "FuzzParseAgreesWithSchema", "50000x"},
}

// Fuzz runs each fuzz target of fuzzTargets for its budget (the WebSocket reader, the frame
// decoder against encoding/json, the compose parser alone and against its JSON Schema).
func Fuzz(ctx context.Context) error {
	for _, f := range fuzzTargets {
		fmt.Printf("==> fuzz %s %s for %s inputs\n", f.module+"/"+strings.TrimPrefix(f.pkg, "./"), f.name, strings.TrimSuffix(f.budget, "x"))
		if err := inDir(f.module, "go", "test", "-run", "^$", "-fuzz", "^"+f.name+"$", "-fuzztime", f.budget, "-timeout", "10m", f.pkg); err != nil {
			return err
		}
	}
	return nil
}

// Lint checks gofmt, go vet over every module, and shellcheck over the shipped scripts.
func Lint(ctx context.Context) error {
	mg.CtxDeps(ctx, Shellcheck)
	out, err := sh.Output("gofmt", "-l", ".")
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != "" {
		return fmt.Errorf("gofmt would change:\n%s", out)
	}
	return Vet(ctx)
}

// Vet runs go vet in every module (these targets included) for each GOOS/GOARCH the module
// ships for (platforms), and over magefiles/ with the mage tag.
func Vet(ctx context.Context) error {
	for _, m := range modules {
		for _, p := range platforms(m) {
			fmt.Printf("==> go vet %s (%s/%s)\n", m, p.GOOS, p.GOARCH)
			if err := inDirEnv(m, []string{"GOOS=" + p.GOOS, "GOARCH=" + p.GOARCH}, "go", "vet", "./..."); err != nil {
				return err
			}
		}
	}
	return inDir(".", "go", "vet", "-tags", "mage", "./magefiles")
}

// Bench runs every module's benchmark program (engine, router, adapter) and prints ratios
// against baselines measured in the same run.
func Bench(ctx context.Context) error {
	ran := false
	for _, m := range modules {
		dir := filepath.Join(m, "internal", "bench")
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		ran = true
		fmt.Printf("== bench %s\n", m)
		if err := sh.RunV("go", "run", "./"+filepath.ToSlash(dir)); err != nil {
			return err
		}
	}
	if !ran {
		return fmt.Errorf("no benchmark programs found (expected <module>/internal/bench)")
	}
	return benchCluster()
}

// benchCluster runs the engine cluster's benchmark: a call served by another engine over an
// embedded nats-server against a local call and a bare NATS request/reply, three rounds, each
// printing from one run calls/s and p50 at c = 1, 16 and 256, the ratios, their targets met or
// missed, the bound NATS itself sets, and the phases of a remote call.
func benchCluster() error {
	fmt.Println("== bench engine cluster (ClusterCall)")
	return inDir("engine", "go", "test", "-run", "^$", "-bench", "^BenchmarkClusterCall$", "-benchtime", "3000x", "-count", "3", "./core")
}

// inDir runs a command in a module directory with its output shown.
func inDir(dir, cmd string, args ...string) error { return inDirEnv(dir, nil, cmd, args...) }

// inDirEnv is inDir with env ("KEY=value") added to the environment.
func inDirEnv(dir string, env []string, cmd string, args ...string) error {
	c := exec.Command(cmd, args...)
	c.Dir = dir
	if env != nil {
		c.Env = append(os.Environ(), env...)
	}
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s %s in %s: %w", cmd, strings.Join(args, " "), dir, err)
	}
	return nil
}

func goEnv(key string) string {
	out, err := sh.Output("go", "env", key)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}
