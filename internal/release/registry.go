package release

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"

	"github.com/iii-go/iii/compose/registry"
)

// PublishWorkers publishes every worker product (Worker in Products) found in assets, whose
// archives are in dir, into the worker registry tree out: one binary package per product and
// version, with the archives of every target listed, the product's default configuration and
// its iii lines (the index's compatibility table). The release's registry step and the e2e
// suite's releaseregistry both publish through it, so both registries are alike. It logs one
// line per package to log.
func PublishWorkers(root, out, dir string, assets []Asset, log io.Writer) error {
	for _, p := range Products {
		if !p.Worker {
			continue
		}
		config, err := ReadDefaultConfig(root, p)
		if err != nil {
			return err
		}
		byVersion := map[string]map[string]string{}
		targets := map[string][]string{}
		for _, a := range assets {
			if a.Product != p.Name || a.Target == "" {
				continue
			}
			if byVersion[a.Version] == nil {
				byVersion[a.Version] = map[string]string{}
			}
			byVersion[a.Version][a.Target] = filepath.Join(dir, a.Name)
			targets[a.Version] = append(targets[a.Version], a.Target)
		}
		if len(byVersion) == 0 {
			return fmt.Errorf("the release in %s has no %s archive", dir, p.Name)
		}
		for _, v := range slices.Sorted(maps.Keys(byVersion)) {
			arts := byVersion[v]
			if err := registry.Publish(out, registry.Package{Name: p.Name, Version: v, Type: registry.TypeBinary,
				Artifacts: arts, Targets: targets[v], Config: config, IIILines: p.IIILines}); err != nil {
				return err
			}
			fmt.Fprintf(log, "registry: %s %s for %d targets in %s%s\n", p.Name, v, len(arts), out, linesNote(p.IIILines))
		}
	}
	return nil
}

// linesNote says which iii lines a package serves, for the registry step's log.
func linesNote(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return fmt.Sprintf(" (serves iii %v)", lines)
}
