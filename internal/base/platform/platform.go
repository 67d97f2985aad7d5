// Package platform names the host as a target triple (x86_64-unknown-linux-gnu, ...), the way
// release assets and registry artifacts are named, so Compose, the updater and the adapter agree.
package platform

import (
	"path/filepath"
	"runtime"
	"strings"
)

// OverrideEnv, when set, replaces the detected target (used by tests and cross-host tooling).
const OverrideEnv = "III_TARGET"

// Target is a parsed target triple.
type Target struct {
	Triple string // e.g. x86_64-unknown-linux-gnu
	GOOS   string // linux, darwin, windows
	GOARCH string // amd64, arm64
	Libc   string // gnu or musl on Linux, empty elsewhere
}

// Host returns the target of this machine, or of $III_TARGET when getenv (the caller's
// environment, os.Getenv in a main; nil is an empty one) sets it.
func Host(getenv func(string) string) Target {
	if getenv != nil {
		if t := getenv(OverrideEnv); t != "" {
			return Parse(t)
		}
	}
	return Detect(runtime.GOOS, runtime.GOARCH, detectLibc)
}

// Detect builds the triple for goos/goarch; on Linux libc reports "gnu" or "musl".
func Detect(goos, goarch string, libc func() string) Target {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686", "arm": "armv7"}[goarch]
	if arch == "" {
		arch = goarch
	}
	t := Target{GOOS: goos, GOARCH: goarch}
	switch goos {
	case "darwin":
		t.Triple = arch + "-apple-darwin"
	case "windows":
		t.Triple = arch + "-pc-windows-msvc"
	case "linux":
		t.Libc = libc()
		t.Triple = arch + "-unknown-linux-" + t.Libc
	default:
		t.Triple = arch + "-unknown-" + goos
	}
	return t
}

// Parse splits a triple into its parts; unknown parts are kept as written.
func Parse(triple string) Target {
	t := Target{Triple: triple}
	parts := strings.Split(triple, "-")
	t.GOARCH = map[string]string{"x86_64": "amd64", "aarch64": "arm64", "i686": "386", "armv7": "arm"}[parts[0]]
	switch {
	case strings.Contains(triple, "-apple-darwin"):
		t.GOOS = "darwin"
	case strings.Contains(triple, "-windows"):
		t.GOOS = "windows"
	case strings.Contains(triple, "-linux"):
		t.GOOS = "linux"
		if strings.HasSuffix(triple, "musl") {
			t.Libc = "musl"
		} else {
			t.Libc = "gnu"
		}
	}
	return t
}

// detectLibc tells glibc from musl by the dynamic loader the system ships.
func detectLibc() string {
	if m, _ := filepath.Glob("/lib/ld-musl-*.so.1"); len(m) > 0 {
		if g, _ := filepath.Glob("/lib*/ld-linux*.so.*"); len(g) == 0 {
			return "musl"
		}
	}
	return "gnu"
}

// String returns the triple.
func (t Target) String() string { return t.Triple }
