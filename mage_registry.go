//go:build mage

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/internal/release"
)

// adapterDefaults is the default configuration published with sandbox-libkrun (the registry's
// sample for 0.2.2, REFERENCE-sandbox.md §7).
var adapterDefaults = map[string]any{"auto_install": true, "image_allowlist": []any{"python", "node"},
	"custom_images": map[string]any{}, "default_cpus": 1, "default_memory_mb": 512,
	"default_idle_timeout_secs": 300, "max_concurrent_sandboxes": 32}

// Registry publishes the release's sandbox-libkrun archives (run `mage release` first) into
// dist/registry/ ($III_DIST_DIR/registry), a worker registry tree Compose reads through
// III_REGISTRY_URL=file://.../dist/registry.
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
	byVersion := map[string]map[string]string{}
	var targets []string
	for _, a := range m.Assets {
		if a.Product != "sandbox-libkrun" {
			continue
		}
		if byVersion[a.Version] == nil {
			byVersion[a.Version] = map[string]string{}
		}
		byVersion[a.Version][a.Target] = filepath.Join(dir, a.Name)
		targets = append(targets, a.Target)
	}
	if len(byVersion) == 0 {
		return fmt.Errorf("%s/manifest.json lists no sandbox-libkrun asset", dir)
	}
	out := filepath.Join(dist, "registry")
	for v, arts := range byVersion {
		if err := registry.Publish(out, registry.Package{Name: "sandbox-libkrun", Version: v, Type: registry.TypeBinary,
			Artifacts: arts, Targets: targets, Config: adapterDefaults}); err != nil {
			return err
		}
		fmt.Printf("registry: sandbox-libkrun %s for %d targets in %s\n", v, len(arts), out)
	}
	return nil
}
