package magetargets

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/iii-go/iii/internal/release"
)

// Registry publishes the release's worker packages (run `mage release` first): sandbox-libkrun
// the event workers http, cron, queue, state, pubsub and stream, rbac-proxy and bridge, each with the archives of every target it
// ships for, into dist/registry/ ($III_DIST_DIR/registry), a worker registry tree Compose reads
// through III_REGISTRY_URL=file://.../dist/registry. Each index carries the compatibility table
// of the iii lines its product serves (release.Product.IIILines).
func Registry() error {
	root, dist, err := rootAndDist()
	if err != nil {
		return err
	}
	version, err := release.ReadVersion(root, release.Products[0])
	if err != nil {
		return err
	}
	dir := release.Dir(dist, version)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return fmt.Errorf("no release in %s (run go tool mage release first): %w", dir, err)
	}
	var m release.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%s/manifest.json: %w", dir, err)
	}
	return release.PublishWorkers(root, filepath.Join(dist, "registry"), dir, m.Assets, os.Stdout)
}
