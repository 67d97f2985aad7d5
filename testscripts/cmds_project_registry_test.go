package testscripts

import (
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/release"
)

func init() {
	registerCmd("releaseregistry", cmdReleaseRegistry)
}

// releaseAssets guards the host's release archives, packaged once per test run.
var releaseAssets struct {
	sync.Mutex
	dir    string
	assets []release.Asset
}

// releaseregistry DIR: publish this build's worker products into the registry tree DIR exactly
// as `go tool mage registry` does (release.PublishWorkers: the versions of the source tree, each
// product's default configuration, the compatibility table of the iii lines it serves), from the
// binaries in $BIN archived for the host target as the release archives them, and point
// III_REGISTRY_URL at DIR (and TRIPLE at the host target, the suffix of each installed package's
// directory). A compose file written for iii (package://api.workers.iii.dev/state
// version "0.22.2") resolves against it.
func cmdReleaseRegistry(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: releaseregistry DIR")
	}
	dir, assets := hostRelease(ts)
	out := ts.MkAbs(args[0])
	var log strings.Builder
	ts.Check(release.PublishWorkers(repoRoot, out, dir, assets, &log))
	ts.Logf("%s", log.String())
	ts.Setenv("III_REGISTRY_URL", "file://"+out)
	ts.Setenv("TRIPLE", platform.Host(os.Getenv).Triple)
}

// hostRelease archives every worker product of $BIN for the host target, as the release does
// (the adapter with the VM firmware it carries, when there is one), once per test run beside the
// binaries, and returns the directory and the assets.
func hostRelease(ts *testscript.TestScript) (string, []release.Asset) {
	releaseAssets.Lock()
	defer releaseAssets.Unlock()
	if releaseAssets.dir != "" {
		return releaseAssets.dir, releaseAssets.assets
	}
	t, ok := release.FindTarget(platform.Host(os.Getenv).Triple)
	if !ok {
		ts.Fatalf("releaseregistry: no release target %s", platform.Host(os.Getenv).Triple)
	}
	dir := filepath.Join(binDir, ".release", t.Triple)
	ts.Check(os.MkdirAll(dir, 0o755))
	var assets []release.Asset
	for _, p := range release.Products {
		if !p.Worker || !t.Ships(p.Name) {
			continue
		}
		version, err := release.ReadVersion(repoRoot, p)
		ts.Check(err)
		var extra []release.File
		if p.Firmware {
			if _, err := os.Stat(adapterFirmware()); err == nil {
				extra, err = release.FirmwareFiles(adapterFirmware())
				ts.Check(err)
			}
		}
		a, err := release.PackageBinary(dir, p.Name, version, t, filepath.Join(binDir, p.Name), extra...)
		if err != nil {
			ts.Fatalf("releaseregistry: %s: %v", p.Name, err)
		}
		assets = append(assets, a)
	}
	if len(assets) == 0 {
		ts.Fatalf("releaseregistry: %s ships no worker", t.Triple)
	}
	releaseAssets.dir, releaseAssets.assets = dir, assets
	return dir, assets
}
