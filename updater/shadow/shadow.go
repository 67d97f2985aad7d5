// Package shadow tells whether the iii a shell runs (`command -v iii`) is the one `iii update`
// installs, and if not, how to fix that.
package shadow

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Shadow is a copy of iii found on PATH before the installed one.
type Shadow struct {
	Path     string // what `command -v iii` names
	Homebrew bool   // it belongs to a Homebrew install
}

// Find looks up name on PATH and returns the copy found there when it is not installed (the
// path `iii update` writes). Both paths are compared after resolving symbolic links.
func Find(name, installed string) (Shadow, bool) {
	found, err := exec.LookPath(name)
	if err != nil {
		return Shadow{}, false
	}
	if abs, err := filepath.Abs(found); err == nil {
		found = abs
	}
	if same(found, installed) {
		return Shadow{}, false
	}
	return Shadow{Path: found, Homebrew: IsHomebrew(found)}, true
}

// same reports whether two paths name the same file.
func same(a, b string) bool {
	if a == b {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	if err1 != nil || err2 != nil {
		return false
	}
	if ra == rb {
		return true
	}
	fa, err1 := os.Stat(ra)
	fb, err2 := os.Stat(rb)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// homebrewMarks are path pieces of Homebrew prefixes: Apple Silicon, Linuxbrew, and the Cellar
// that Intel-Mac /usr/local/bin links point into.
var homebrewMarks = []string{"/opt/homebrew/", "/linuxbrew/", "/Cellar/"}

// IsHomebrew reports whether p, or the file it links to, is inside a Homebrew prefix.
func IsHomebrew(p string) bool {
	candidates := []string{filepath.ToSlash(p)}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		candidates = append(candidates, filepath.ToSlash(r))
	}
	for _, c := range candidates {
		for _, m := range homebrewMarks {
			if strings.Contains(c, m) {
				return true
			}
		}
	}
	return false
}
