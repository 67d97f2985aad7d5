package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/updater/leftover"
	"github.com/iii-go/iii/updater/shadow"
)

// checkShadow says when the iii a shell runs is not the installed one, and how to fix it (req I2).
func (u *updater) checkShadow(ctx context.Context) {
	installed := filepath.Join(u.binDir, u.exe(Self))
	if _, err := os.Stat(installed); err != nil {
		return
	}
	s, ok := shadow.Find(Self, installed)
	if !ok {
		if !onPath(u.binDir) {
			fmt.Fprintf(u.stderr, "  note: %s is not on your PATH. Add it: export PATH=\"%s:$PATH\"\n", u.binDir, u.binDir)
		}
		return
	}
	version := ""
	if v := installedVersion(ctx, s.Path); v != "" {
		version = " (" + v + ")"
	}
	fmt.Fprintf(u.stderr, "  warning: your shell runs %s%s, not %s, which iii update installs.\n", s.Path, version, installed)
	if s.Homebrew {
		fmt.Fprintf(u.stderr, "  Upgrade that copy with `brew upgrade iii`, or remove it (`brew uninstall iii`) and put %s first on your PATH.\n", u.binDir)
		return
	}
	fmt.Fprintf(u.stderr, "  Remove that copy (rm %s) and put %s first on your PATH: export PATH=\"%s:$PATH\"\n", s.Path, u.binDir, u.binDir)
}

// onPath reports whether dir is one of $PATH's entries.
func onPath(dir string) bool {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.Clean(d) == filepath.Clean(dir) {
			return true
		}
	}
	return false
}

// reportLeftovers lists what 0.25 left behind, with the commands that remove it. It deletes
// nothing (req I3).
func (u *updater) reportLeftovers(home string) {
	exe := strings.TrimPrefix(u.exe(Self), Self)
	items := leftover.Find(home, u.binDir, exe)
	if len(items) == 0 {
		return
	}
	fmt.Fprintln(u.stderr, "  iii 0.26 no longer uses these files left by 0.25. Nothing was deleted; remove them yourself:")
	var files, dirs []string
	for _, it := range items {
		p := it.Path
		if it.Dir {
			dirs = append(dirs, p)
			p += string(filepath.Separator)
		} else {
			files = append(files, p)
		}
		fmt.Fprintf(u.stderr, "    %s  (%s)\n", p, it.About)
	}
	if len(files) > 0 {
		fmt.Fprintf(u.stderr, "    rm %s\n", strings.Join(files, " "))
	}
	if len(dirs) > 0 {
		fmt.Fprintf(u.stderr, "    rm -r %s\n", strings.Join(dirs, " "))
	}
	iii := filepath.Join(home, ".iii")
	fmt.Fprintf(u.stderr, "  Keep the rest of %s and %s: sandbox-libkrun still uses them.\n",
		filepath.Join(iii, "lib")+string(filepath.Separator), filepath.Join(iii, "cache")+string(filepath.Separator))
}
