package magetargets

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/internal/release"
)

// Registry publishes the release's worker packages (run `mage release` first): sandbox-libkrun
// the event workers http, cron, queue, state, pubsub and stream, rbac-proxy and bridge, each with the archives of every target it
// ships for, into dist/registry/ ($III_DIST_DIR/registry), a worker registry tree Compose reads
// through III_REGISTRY_URL=file://.../dist/registry.
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
	out := filepath.Join(dist, "registry")
	for _, p := range release.Products {
		if !p.Worker {
			continue
		}
		config, err := release.ReadDefaultConfig(root, p)
		if err != nil {
			return err
		}
		if err := publishProduct(out, dir, p.Name, m.Assets, config); err != nil {
			return err
		}
	}
	return nil
}

// publishProduct publishes every version of product found in assets into the registry out, with
// config as the package's default configuration.
func publishProduct(out, dir, product string, assets []release.Asset, config map[string]any) error {
	byVersion := map[string]map[string]string{}
	targets := map[string][]string{}
	for _, a := range assets {
		if a.Product != product {
			continue
		}
		if byVersion[a.Version] == nil {
			byVersion[a.Version] = map[string]string{}
		}
		byVersion[a.Version][a.Target] = filepath.Join(dir, a.Name)
		targets[a.Version] = append(targets[a.Version], a.Target)
	}
	if len(byVersion) == 0 {
		return fmt.Errorf("%s/manifest.json lists no %s asset", dir, product)
	}
	for v, arts := range byVersion {
		if err := registry.Publish(out, registry.Package{Name: product, Version: v, Type: registry.TypeBinary,
			Artifacts: arts, Targets: targets[v], Config: config}); err != nil {
			return err
		}
		fmt.Printf("registry: %s %s for %d targets in %s\n", product, v, len(arts), out)
	}
	return nil
}
