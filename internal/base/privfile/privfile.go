// Package privfile keeps secrets the user alone may read: a file of mode 0600 in a directory of
// mode 0700, both the user's own and neither a symlink, written atomically (a temporary file
// beside it, renamed over it, so a link at the path is replaced and never written through).
// Compose's token files, the ~/.iii/compose/tokens records and the engine's owner credential
// all go through it.
package privfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// EnsureDir creates dir (mode 0700) when missing and tightens an existing one of the user's to
// 0700; a symlink, a non-directory or another user's directory is refused.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	err := Check(dir, true)
	if err == nil {
		return nil
	}
	st, lerr := os.Lstat(dir)
	if lerr != nil || !st.IsDir() || !ownedByUser(st) {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// WriteAtomic writes data to a mode-0600 temporary file beside path and renames it over path.
// The directory must exist; nothing is left behind on failure.
func WriteAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(os.Chmod(tmp.Name(), 0o600), werr, cerr, os.Rename(tmp.Name(), path)); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Write is EnsureDir of path's directory, then WriteAtomic.
func Write(path string, data []byte) error {
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return err
	}
	return WriteAtomic(path, data)
}

// IsTemp reports whether name is one of WriteAtomic's temporary files.
func IsTemp(name string) bool { return len(name) > 5 && name[:5] == ".tmp-" }

// Check requires path (a directory when dir) to be no symlink, the user's own, and closed to
// group and others; the error says which it is not.
func Check(path string, dir bool) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink; it is not followed", path)
	case dir && !st.IsDir():
		return fmt.Errorf("%s is not a directory", path)
	case !dir && !st.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	case !ownedByUser(st):
		return fmt.Errorf("%s belongs to another user", path)
	case exposed(st.Mode()):
		want := "0600"
		if dir {
			want = "0700"
		}
		return fmt.Errorf("%s has mode %#o; it must be %s (readable by you alone)", path, st.Mode().Perm(), want)
	}
	return nil
}
