package doctor

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/compose/state"
)

// The leftover checks never follow a symbolic link below the tree they inspect (the project's
// directory, $III_COMPOSE_STATE_DIR, ~/.iii): a cloned repository can ship
// .iii/compose/<ns>/vm -> ../../../../elsewhere, and following it would report, and --fix move,
// directories that are neither the project's nor iii's. Such a link is reported itself, as
// SYMLINK_NOT_FOLLOWED, and nothing behind it is touched.

// firstLink returns the first symbolic link among the components of p below root (root itself
// excluded, p included), "" when there is none. It fails when p is not under root or a component
// cannot be read.
func firstLink(root, p string) (string, error) {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return "", err
	}
	if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%s is not under %s", p, root)
	}
	if rel == "." {
		return "", nil
	}
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		st, err := os.Lstat(cur)
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return cur, nil
		}
	}
	return "", nil
}

func isLink(d fs.DirEntry) bool { return d.Type()&fs.ModeSymlink != 0 }

// vmStateBehind reports whether dir, read through links, holds what OLD_VM_STATE would report
// were the links followed: at depth 0 dir is a vm/ directory (any subdirectory counts), at 1 a
// namespace's state directory, at 2 a base holding namespaces. It only reads.
func vmStateBehind(dir string, depth int) bool {
	if depth == 1 {
		return vmStateBehind(filepath.Join(dir, state.LegacyVMDir), 0)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if depth == 0 {
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				return true
			}
		} else if vmStateBehind(p, depth-1) {
			return true
		}
	}
	return false
}

// linkFinding is the SYMLINK_NOT_FOLLOWED finding for link, met below root where doctor looked
// for what.
func linkFinding(link, root, what string) Finding {
	target, err := os.Readlink(link)
	if err != nil {
		target = "?"
	}
	to := shq(target)
	if abs, err := filepath.EvalSymlinks(link); err != nil {
		to += " (dangling)"
	} else if abs != target {
		to += " (" + abs + ")"
	}
	return Finding{Code: SymlinkNotFollowed, Severity: Warning, Path: link,
		Message: fmt.Sprintf("a symbolic link to %s where iii doctor looks for %s; it follows no link below %s, so it neither reports what the link leads to nor moves it (iii doctor --fix leaves it alone)", to, what, root),
		Fix:     "if the link should not be there, remove the link itself, never what it points at: rm " + shq(link)}
}

// addLink adds the finding for link once.
func (r *Report) addLink(link, root, what string) {
	for _, f := range r.Findings {
		if f.Code == SymlinkNotFollowed && f.Path == link {
			return
		}
	}
	r.add(linkFinding(link, root, what))
}

// removeCommand is the shell command that removes path, quoted: rm, or rm -r for a directory.
func removeCommand(path string, dir bool) string {
	if dir {
		return "rm -r " + shq(path)
	}
	return "rm " + shq(path)
}
