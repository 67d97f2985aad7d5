// Package iiidir is the layout of ~/.iii that the iii binaries share, and the variables that
// move its parts, so that Compose, the engine, the adapter, the workers and the tooling name the
// same directories. Each part's owner (the one package that writes it) is named beside it.
package iiidir

import (
	"os"
	"path/filepath"
)

// The variables that move a part of the layout.
const (
	CacheEnv = "III_CACHE_DIR" // the image cache
	LibEnv   = "III_LIB_DIR"   // the VM firmware
)

// The parts of ~/.iii, as slash paths relative to it.
const (
	CacheDir         = "cache"             // image cache; $III_CACHE_DIR moves it (sandbox-libkrun/image)
	LibDir           = "lib"               // VM firmware; $III_LIB_DIR moves it (sandbox-libkrun/firmware)
	PackagesDir      = "compose/packages"  // worker packages Compose installs (compose/registry); $III_COMPOSE_STATE_DIR/packages replaces it
	ProjectTokensDir = "compose/tokens"    // project-token records for iii call (internal/base/tokens)
	OwnersDir        = "engine/owners"     // owner credentials an engine writes for its user's Compose (internal/base/tokens)
	WorkersDir       = "sandbox/workers"   // VM workers' state, one directory per vm id (sandbox-libkrun/vmworker)
	SnapshotsDir     = "sandbox/snapshots" // sandbox snapshots (sandbox-libkrun/snapshot)
	DataDir          = "data"              // the event workers' stores, <worker>/<namespace> (workers/jsstore)
	TrashDir         = "trash"             // what iii doctor --fix moved aside (doctor)
)

// Under is the part of ~/.iii named by part (one of the ...Dir constants) below the home
// directory home, with elem joined after it.
func Under(home, part string, elem ...string) string {
	return filepath.Join(append([]string{home, ".iii", filepath.FromSlash(part)}, elem...)...)
}

// Env is what the layout is resolved from: the variables a main hands down and the home
// directory. The zero Env has no variables and the user's home directory.
type Env struct {
	Getenv func(string) string // the caller's environment (os.Getenv in a main); nil is an empty one
	Home   string              // "" asks os.UserHomeDir, falling back to /root
}

func (e Env) get(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

// Root is ~/.iii.
func (e Env) Root() string {
	home := e.Home
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil || home == "" {
			home = "/root"
		}
	}
	return filepath.Join(home, ".iii")
}

// Cache is the image cache: $III_CACHE_DIR, else ~/.iii/cache.
func (e Env) Cache() string { return e.dir(CacheEnv, CacheDir) }

// Lib is the VM firmware directory: $III_LIB_DIR, else ~/.iii/lib.
func (e Env) Lib() string { return e.dir(LibEnv, LibDir) }

func (e Env) dir(env, name string) string {
	if d := e.get(env); d != "" {
		return d
	}
	return filepath.Join(e.Root(), name)
}
