// Package iiidir is the layout of ~/.iii that the iii binaries share, and the variables that
// move its parts, so that the adapter, its host checks and the tooling name the same directories.
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
func (e Env) Cache() string { return e.dir(CacheEnv, "cache") }

// Lib is the VM firmware directory: $III_LIB_DIR, else ~/.iii/lib.
func (e Env) Lib() string { return e.dir(LibEnv, "lib") }

func (e Env) dir(env, name string) string {
	if d := e.get(env); d != "" {
		return d
	}
	return filepath.Join(e.Root(), name)
}
