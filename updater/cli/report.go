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
		if !onPath(u.binDir, u.path) {
			fmt.Fprintf(u.stderr, "  note: %s is not on your PATH. Add it: export PATH=\"%s:$PATH\"\n", u.binDir, u.binDir)
		}
		return
	}
	fmt.Fprintf(u.stderr, "  warning: %s\n", s.Warning(installed, shadow.Version(ctx, s.Path)))
	fmt.Fprintf(u.stderr, "  %s\n", s.Fix(u.binDir))
}

// onPath reports whether dir is one of path's ($PATH's) entries.
func onPath(dir, path string) bool {
	for _, d := range filepath.SplitList(path) {
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
	fmt.Fprintln(u.stderr, "  "+leftover.Heading)
	for _, it := range items {
		fmt.Fprintf(u.stderr, "    %s  (%s)\n", it.Display(), it.About)
	}
	for _, c := range leftover.RemoveCommands(items) {
		fmt.Fprintf(u.stderr, "    %s\n", c)
	}
	fmt.Fprintln(u.stderr, "  "+leftover.KeepNote(home))
}
