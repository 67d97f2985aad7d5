package vmworker

import (
	"github.com/iii-go/iii/internal/base/iiidir"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/fspath"
)

// Roots are the host directories a VM worker may mount, fixed when the adapter starts.
type Roots struct {
	list []string // absolute, cleaned, symlinks resolved
}

// NewRoots resolves each directory once; a root that does not exist yet is kept as given
// (cleaned and absolute), so that it still bounds later mounts.
func NewRoots(dirs []string) Roots {
	var r Roots
	seen := map[string]bool{}
	for _, d := range dirs {
		if strings.TrimSpace(d) == "" {
			continue
		}
		p := canonical(d)
		if !seen[p] {
			seen[p] = true
			r.list = append(r.list, p)
		}
	}
	return r
}

// List returns the roots in the order given.
func (r Roots) List() []string { return append([]string(nil), r.list...) }

// Check returns S501 unless path lies at or under one of the roots.
func (r Roots) Check(path string) error {
	p := canonical(path)
	for _, root := range r.list {
		if fspath.Within(p, root) {
			return nil
		}
	}
	return scode.OutsideRoots(p, r.list)
}

// rootOf is the deepest root at or above the canonical path p, "" when none: the package cache
// (~/.iii/compose/packages) rather than a home directory that is a root too.
func (r Roots) rootOf(p string) string {
	best := ""
	for _, root := range r.list {
		if fspath.Within(p, root) && len(root) > len(best) {
			best = root
		}
	}
	return best
}

// canonical makes p absolute, cleaned, with symlinks resolved where it exists.
func canonical(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return filepath.Clean(p)
}

// PackageCache is Compose's package cache: <stateDir>/packages when stateDir
// ($III_COMPOSE_STATE_DIR) is set, else ~/.iii/compose/packages.
func PackageCache(stateDir string) string {
	if d := stateDir; d != "" {
		return filepath.Join(d, "packages")
	}
	home, _ := os.UserHomeDir()
	return iiidir.Under(home, iiidir.PackagesDir)
}

// StateRoot is where VM worker state lives: ~/.iii/sandbox/workers.
func StateRoot() string {
	home, _ := os.UserHomeDir()
	return iiidir.Under(home, iiidir.WorkersDir)
}

// ownedByUs reports whether the file st describes belongs to the user this adapter runs as.
func ownedByUs(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return !ok || int(sys.Uid) == os.Getuid()
}
