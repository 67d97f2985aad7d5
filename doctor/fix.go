package doctor

import (
	"errors"
	"fmt"
	"github.com/iii-go/iii/internal/base/iiidir"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	composeerr "github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/fileedit"
	"github.com/iii-go/iii/compose/state"
)

// Action is one thing Fix did, or refused to do.
type Action struct {
	Code string `json:"code"`
	Path string `json:"path"`
	// Did is "rewrote", "moved" or "refused".
	Did string `json:"did"`
	// To is where a moved path went.
	To string `json:"to,omitempty"`
	// Why says why a fix was refused: the processes that hold the path, or the error.
	Why string `json:"why,omitempty"`
}

// FixResult is what Fix did.
type FixResult struct {
	Actions []Action `json:"actions"`
	// Trash is the directory the leftovers went to ("" when nothing moved); Restore is the script
	// in it that moves them back.
	Trash   string `json:"trash,omitempty"`
	Restore string `json:"restore,omitempty"`
}

// Fix applies the safe fixes of r: it rewrites the compose file for SANDBOX_CONFIG_MOVED and
// moves every LEFTOVER_BINARY, LEFTOVER_PATH and OLD_VM_STATE path into
// ~/.iii/trash/<UTC timestamp>/, keeping its path relative to the home directory (or, outside it,
// its absolute path under root/). It deletes nothing, and it refuses to move a path that a
// running process holds open, executes or works in (Linux), naming the process, or one a
// symbolic link below the tree it was found in leads to. Everything else stays advice.
func Fix(r *Report, o Options, now time.Time) (*FixResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	res := &FixResult{Actions: []Action{}}
	var moves []Finding
	for _, f := range r.Findings {
		switch {
		case f.Code == composeerr.SandboxConfigMoved && f.Fixable:
			a := Action{Code: f.Code, Path: f.Path, Did: "rewrote"}
			_, _, moved, err := fileedit.MoveSandboxConfig(f.Path)
			switch {
			case err != nil:
				a.Did, a.Why = "refused", err.Error()
			case !moved:
				a.Did, a.Why = "refused", "the file no longer declares engine.workers.iii-sandbox"
			}
			res.Actions = append(res.Actions, a)
		case f.movable:
			moves = append(moves, f)
		}
	}
	if len(moves) == 0 {
		return res, nil
	}
	var paths []string
	for _, f := range moves {
		paths = append(paths, trimSep(f.Path))
	}
	held := holders("/proc", paths)
	trash := ""
	var restore []string
	for _, f := range moves {
		src := trimSep(f.Path)
		a := Action{Code: f.Code, Path: src}
		if f.root != "" {
			// Checked again: the tree may have changed since Check looked.
			if link, err := firstLink(f.root, src); err != nil || link != "" {
				a.Did, a.Why = "refused", fmt.Sprintf("the symbolic link %s on its path leads out of %s, and iii doctor --fix moves nothing through a link", link, f.root)
				if err != nil {
					a.Why = err.Error()
				}
				res.Actions = append(res.Actions, a)
				continue
			}
		}
		if hs := held[src]; len(hs) > 0 {
			var why []string
			for _, h := range hs {
				why = append(why, h.String())
			}
			a.Did, a.Why = "refused", strings.Join(why, "; ")+"; stop it and run iii doctor --fix again"
			res.Actions = append(res.Actions, a)
			continue
		}
		if trash == "" {
			if trash, err = newTrash(o.Home, now); err != nil {
				return res, err
			}
			res.Trash = trash
		}
		dst := filepath.Join(trash, trashRel(o.Home, src))
		if err := move(src, dst); err != nil {
			a.Did, a.Why = "refused", err.Error()
		} else {
			a.Did, a.To = "moved", dst
			restore = append(restore, fmt.Sprintf("mkdir -p %s && mv %s %s", shq(filepath.Dir(src)), shq(dst), shq(src)))
		}
		res.Actions = append(res.Actions, a)
	}
	if len(restore) > 0 {
		res.Restore = filepath.Join(trash, "restore.sh")
		script := "#!/bin/sh\n# Moves back what iii doctor --fix moved here. Run: sh " + res.Restore + "\nset -e\n" + strings.Join(restore, "\n") + "\n"
		if err := state.WriteFileAtomic(res.Restore, []byte(script), 0o644); err != nil {
			return res, err
		}
	}
	return res, nil
}

func trimSep(p string) string {
	if len(p) > 1 {
		return strings.TrimSuffix(p, string(filepath.Separator))
	}
	return p
}

// newTrash creates ~/.iii/trash/<UTC timestamp>/, with a suffix when a run in the same second
// made one already.
func newTrash(home string, now time.Time) (string, error) {
	base := iiidir.Under(home, iiidir.TrashDir, now.UTC().Format("20060102T150405Z"))
	if err := os.MkdirAll(filepath.Dir(base), 0o700); err != nil {
		return "", err
	}
	dir := base
	for i := 2; ; i++ {
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return "", err
		}
		dir = fmt.Sprintf("%s-%d", base, i)
	}
}

// trashRel is where src goes inside the trash: its path relative to home, or root/ and its
// absolute path when it is outside home.
func trashRel(home, src string) string {
	if rel, err := filepath.Rel(home, src); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return rel
	}
	return filepath.Join("root", src)
}

// move renames src to dst, creating dst's parents; across file systems it copies, then removes
// the source only once the copy is complete.
func move(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	err := os.Rename(src, dst)
	if err == nil || !errors.Is(err, syscall.EXDEV) {
		return err
	}
	if err := copyTree(src, dst); err != nil {
		os.RemoveAll(dst)
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return os.RemoveAll(src)
}

// copyTree copies files, directories and symbolic links under src to dst, modes kept.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(out, info.Mode().Perm())
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, out)
		case info.Mode().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			o, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(o, in); err != nil {
				o.Close()
				return err
			}
			return o.Close()
		}
		return fmt.Errorf("%s is neither a file, a directory nor a link", p)
	})
}

// shq quotes s for a POSIX shell.
func shq(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
