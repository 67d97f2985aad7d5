// Package leftover finds what iii 0.25 left on disk that 0.26 no longer uses: the iii-worker and
// iii-init binaries beside iii, and iii-worker's files under ~/.iii (req I3, J2). It only looks;
// it never deletes anything. `iii update` lists what it finds and `iii doctor` reports and moves
// it aside, both from this one list.
package leftover

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Item is one leftover path.
type Item struct {
	Path  string // absolute path
	Dir   bool   // a directory (removed with rm -r)
	About string // what 0.25 kept there
}

// Binaries are the 0.25 companions of iii that 0.26 no longer ships.
var Binaries = []string{"iii-worker", "iii-init"}

// homePaths are iii-worker's paths under ~/.iii (req J2), relative to ~/.iii.
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
	return append(FindBinaries(binDir, exe), FindHome(home)...)
}

// FindBinaries returns the 0.25 binaries that exist in binDir.
func FindBinaries(binDir, exe string) []Item {
	var items []Item
	for _, b := range Binaries {
		p := filepath.Join(binDir, b+exe)
		if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
			items = append(items, Item{Path: p, About: "the 0.25 " + b + " binary"})
		}
	}
	return items
}

// FindHome returns iii-worker's paths under home/.iii that exist. It never lists the rest of
// ~/.iii/lib/ or ~/.iii/cache/, which sandbox-libkrun still uses.
func FindHome(home string) []Item {
	var items []Item
	for _, h := range homePaths {
		p := filepath.Join(home, ".iii", filepath.FromSlash(h.rel))
		if fi, err := os.Lstat(p); err == nil {
			items = append(items, Item{Path: p, Dir: fi.IsDir(), About: h.about})
		}
	}
	return items
}

// Display is the item's path as listed: a directory ends in a separator.
func (it Item) Display() string {
	if it.Dir {
		return it.Path + string(filepath.Separator)
	}
	return it.Path
}

// RemoveCommand is the shell command that removes the item: rm, or rm -r for a directory.
func (it Item) RemoveCommand() string {
	if it.Dir {
		return "rm -r " + it.Path
	}
	return "rm " + it.Path
}

// Heading introduces a list of leftovers.
const Heading = "iii 0.26 no longer uses these files left by 0.25. Nothing was deleted; remove them yourself:"

// RemoveCommands returns the commands that remove items: one rm for the files, one rm -r for
// the directories.
func RemoveCommands(items []Item) []string {
	var files, dirs []string
	for _, it := range items {
		if it.Dir {
			dirs = append(dirs, it.Path)
		} else {
			files = append(files, it.Path)
		}
	}
	var out []string
	if len(files) > 0 {
		out = append(out, "rm "+strings.Join(files, " "))
	}
	if len(dirs) > 0 {
		out = append(out, "rm -r "+strings.Join(dirs, " "))
	}
	return out
}

// KeepNote says which parts of ~/.iii the upgrade keeps (req J3).
func KeepNote(home string) string {
	iii := filepath.Join(home, ".iii")
	return fmt.Sprintf("Keep the rest of %s and %s: sandbox-libkrun still uses them.",
		filepath.Join(iii, "lib")+string(filepath.Separator), filepath.Join(iii, "cache")+string(filepath.Separator))
}
