// Package pkginstall resolves a compose file's package:// containers through their registry and
// installs them into the package cache, printing each container's progress (resolving,
// downloading, ready to start) the way `docker compose up` does, and returns what the runtime
// needs to start them.
package pkginstall

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/project"
	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/engine/platform"
)

// Pinner reports the version a lock pins for a container ("" when the lock has none, or the
// container must be re-resolved).
type Pinner func(key string) string

// Installer installs package containers.
type Installer struct {
	// Cache is the package cache directory.
	Cache string
	// Target is the host target triple (default: platform.Host()).
	Target string
	// Out receives progress lines.
	Out io.Writer
	// Pin, when set, gives locked versions; containers without a pin are resolved.
	Pin Pinner

	mu sync.Mutex
}

func (in *Installer) printf(format string, args ...any) {
	if in.Out != nil {
		fmt.Fprintf(in.Out, format+"\n", args...)
	}
}

// Install resolves and installs every package container of f. Containers named in update (or
// all when update holds "*") ignore the pin and resolve their selector again.
func (in *Installer) Install(ctx context.Context, f *composefile.File, update []string) (map[string]project.Package, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	target := in.Target
	if target == "" {
		target = platform.Host().Triple
	}
	cache := &registry.Cache{Dir: in.Cache, Progress: in.Out}
	out := map[string]project.Package{}
	for _, k := range f.Order {
		c := f.Containers[k]
		if !c.IsPackage() {
			continue
		}
		client, err := registry.ForHost(c.Source.Host)
		if err != nil {
			return nil, err
		}
		selector := c.Version
		if in.Pin != nil && !forced(update, k) {
			if v := in.Pin(k); v != "" {
				selector = v
			}
		}
		in.printf(" ⠿ Container %-20s Resolving %s@%s", k, c.Source.Name, selector)
		v, err := client.Resolve(ctx, c.Source.Name, selector)
		if err != nil {
			return nil, err
		}
		var key string
		var art registry.Artifact
		switch v.Type {
		case registry.TypeBinary:
			a, ok := v.Artifacts[target]
			if !ok {
				return nil, errcode.New(errcode.UnsupportedPlatform, "container '%s': %s %s has no build for %s. It ships: %v", k, c.Source.Name, v.Version, target, v.Shipped())
			}
			key, art = target, a
		case registry.TypeBundle:
			a, ok := v.Artifacts[registry.BundleKey]
			if !ok {
				return nil, errcode.New(errcode.PackageNotResolved, "container '%s': bundle %s %s has no artifact", k, c.Source.Name, v.Version)
			}
			key, art = registry.BundleKey, a
		case registry.TypeEngine:
			return nil, errcode.New(errcode.EngineWorkerIsBuiltin, "container '%s': %s is part of the engine; remove the container", k, c.Source.Name)
		default:
			return nil, errcode.New(errcode.UnsupportedPackageKind, "container '%s': %s %s is of type %q", k, c.Source.Name, v.Version, v.Type)
		}
		inst, err := cache.Install(ctx, client, c.Source.Name, v.Version, key, art)
		if err != nil {
			return nil, err
		}
		what := "Resolved"
		if inst.Fresh {
			what = "Downloaded"
		}
		in.printf(" ✔ Container %-20s %s %s %s", k, what, c.Source.Name, v.Version)
		p := project.Package{Name: c.Source.Name, Version: v.Version, Kind: v.Type, Dir: inst.Dir}
		if v.Config != nil {
			p.DefaultConfig = v.Config
		}
		if v.Type == registry.TypeBinary {
			p.Exec = filepath.Join(inst.Dir, c.Source.Name)
			if _, err := os.Stat(p.Exec); err != nil {
				return nil, errcode.New(errcode.PackageArtifactEmpty, "container '%s': %s %s has no executable %s", k, c.Source.Name, v.Version, c.Source.Name)
			}
		}
		out[k] = p
	}
	return out, nil
}

func forced(update []string, key string) bool {
	for _, u := range update {
		if u == "*" || u == key {
			return true
		}
	}
	return false
}
