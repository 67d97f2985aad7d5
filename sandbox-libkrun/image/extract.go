package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/internal/unixmode"
)

// dirMode is a directory's mode and time, applied after every entry is written.
type dirMode struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

// extract unpacks a flattened image tar into dir. Every path is resolved inside dir through
// os.Root, so neither ".." nor symlinks in the archive can write outside it.
func extract(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var dirs []dirMode
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if name == "." || name == ".." || strings.HasPrefix(name, "../") {
			continue
		}
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		mode := unixmode.FileMode(uint32(h.Mode))
		if h.Typeflag == tar.TypeDir {
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			dirs = append(dirs, dirMode{name, mode, h.ModTime})
			continue
		}
		if err := writeEntry(root, tr, h, name, mode); err != nil {
			return err
		}
	}
	return applyDirModes(root, dirs)
}

// writeEntry writes one non-directory entry named name (already cleaned) under root.
func writeEntry(root *os.Root, tr *tar.Reader, h *tar.Header, name string, mode fs.FileMode) error {
	switch h.Typeflag {
	case tar.TypeReg:
		_ = root.Remove(name)
		f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		_ = root.Lchown(name, h.Uid, h.Gid)
		if err := root.Chmod(name, mode); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		_ = root.Chtimes(name, h.ModTime, h.ModTime)
	case tar.TypeSymlink:
		_ = root.Remove(name)
		if err := root.Symlink(h.Linkname, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		_ = root.Lchown(name, h.Uid, h.Gid)
	case tar.TypeLink:
		target := path.Clean(strings.TrimPrefix(h.Linkname, "/"))
		if strings.HasPrefix(target, "../") {
			return fmt.Errorf("%s: hard link outside the image", name)
		}
		_ = root.Remove(name)
		if err := root.Link(target, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	default:
		// Device nodes, fifos and the like are not needed in a sandbox root.
	}
	return nil
}

// applyDirModes sets directory modes and times last, so read-only directories do not block their
// own contents and later entries do not move their times.
func applyDirModes(root *os.Root, dirs []dirMode) error {
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chmod(dirs[i].name, dirs[i].mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		_ = root.Chtimes(dirs[i].name, dirs[i].mtime, dirs[i].mtime)
	}
	return nil
}
