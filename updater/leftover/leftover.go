// Package leftover finds what iii 0.25 left on disk that 0.26 no longer uses: the iii-worker and
// iii-init binaries beside iii, and iii-worker's files under ~/.iii. It only looks; it never
// deletes anything.
package leftover

import (
	"os"
	"path/filepath"
)

// Item is one leftover path.
type Item struct {
	Path  string // absolute path
	Dir   bool   // a directory (removed with rm -r)
	About string // what 0.25 kept there
}

// Binaries are the 0.25 companions of iii that 0.26 no longer ships.
var Binaries = []string{"iii-worker", "iii-init"}

// homePaths are iii-worker's paths under ~/.iii (REQUIREMENTS J2), relative to ~/.iii.
var homePaths = []struct{ rel, about string }{
	{"managed", "the state of each VM worker iii-worker ran"},
	{"workers", "binary workers iii-worker installed"},
	{"workers-bundle", "bundle workers iii-worker installed"},
	{"cache/bundles", "bundle archives iii-worker downloaded"},
	{"logs", "iii-worker's worker logs"},
	{"pids", "iii-worker's PID files"},
	{"lib/iii-init", "the 0.25 VM init binary"},
	{"rootfs", "left by releases before 0.25"},
	{"images", "left by releases before 0.25"},
}

// Find returns the leftovers that exist: binaries in binDir (exe is the executable suffix,
// ".exe" on Windows), then paths under home/.iii, in a fixed order.
func Find(home, binDir, exe string) []Item {
	var items []Item
	for _, b := range Binaries {
		p := filepath.Join(binDir, b+exe)
		if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
			items = append(items, Item{Path: p, About: "the 0.25 " + b + " binary"})
		}
	}
	for _, h := range homePaths {
		p := filepath.Join(home, ".iii", filepath.FromSlash(h.rel))
		if fi, err := os.Lstat(p); err == nil {
			items = append(items, Item{Path: p, Dir: fi.IsDir(), About: h.about})
		}
	}
	return items
}
