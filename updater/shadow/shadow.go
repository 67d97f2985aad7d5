// Package shadow tells whether the iii a shell runs (`command -v iii`) is the one `iii update`
// installs, and if not, how to fix that.
package shadow

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
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

// Warning says that the shell runs this copy, of version (empty when unknown), rather than
// installed, the copy `iii update` writes (req I2).
func (s Shadow) Warning(installed, version string) string {
	if version != "" {
		version = " (" + version + ")"
	}
	return fmt.Sprintf("your shell runs %s%s, not %s, which iii update installs.", s.Path, version, installed)
}

// Fix says how to make the shell run the copy in binDir: upgrade or remove a Homebrew copy, or
// remove any other copy, and put binDir first on PATH.
func (s Shadow) Fix(binDir string) string {
	if s.Homebrew {
		return fmt.Sprintf("Upgrade that copy with `brew upgrade iii`, or remove it (`brew uninstall iii`) and put %s first on your PATH.", binDir)
	}
	return fmt.Sprintf("Remove that copy (rm %s) and put %s first on your PATH: export PATH=\"%s:$PATH\"", s.Path, binDir, binDir)
}

// Version runs `bin --version` (5 s at most) and returns the last word it prints without a
// leading v, or "" when bin is missing or fails.
func Version(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return ""
	}
	f := strings.Fields(out.String())
	if len(f) == 0 {
		return ""
	}
	return strings.TrimPrefix(f[len(f)-1], "v")
}
