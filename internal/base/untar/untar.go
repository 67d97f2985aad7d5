// Package untar unpacks a tar stream into a directory. Every entry is written through os.Root,
// so neither "..", an absolute name, nor a symbolic link in the archive (or already in the
// directory) can make it write outside.
package untar

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

	"github.com/iii-go/iii/internal/base/unixmode"
)

// Options say which parts of the archive are kept and how much of it is accepted.
type Options struct {
	// Strict refuses an entry whose name is absolute or leaves the directory; otherwise a
	// leading "/" is dropped and an entry that leaves is skipped.
	Strict bool
	// Links keeps symbolic and hard links (a hard link's target must lie inside); otherwise
	// they are skipped, like device nodes and fifos always are.
	Links bool
	// Owners applies the entries' uid and gid where the process may.
	Owners bool
	// Modes applies the entries' full modes (setuid, setgid, sticky included) and, once all is
	// written, the directories' modes and times; otherwise a file keeps its permission bits plus
	// owner read, and a directory is 0755.
	Modes bool
	// MaxFiles and MaxBytes cap the regular files and their bytes (0: no cap).
	MaxFiles int
	MaxBytes int64
}

// TooLargeError reports an archive past MaxFiles or MaxBytes.
type TooLargeError struct{ What string }

func (e *TooLargeError) Error() string { return e.What }

// Extract unpacks r into dir, which must exist, and returns the number of regular files written.
func Extract(r io.Reader, dir string, o Options) (int, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	x := &extractor{root: root, o: o, budget: o.MaxBytes}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return x.files, err
		}
		if err := x.entry(tr, h); err != nil {
			return x.files, err
		}
	}
	return x.files, x.applyDirModes()
}

type extractor struct {
	root   *os.Root
	o      Options
	files  int
	budget int64
	dirs   []dirMode
}

// dirMode is a directory's mode and time, applied after every entry is written.
type dirMode struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

func (x *extractor) entry(tr *tar.Reader, h *tar.Header) error {
	name, ok := clean(h.Name)
	if x.o.Strict && (!ok || strings.HasPrefix(h.Name, "/")) {
		return fmt.Errorf("unsafe entry %q", h.Name)
	}
	if !ok || name == "." {
		return nil
	}
	if parent := path.Dir(name); parent != "." {
		if err := x.root.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	mode := unixmode.FileMode(uint32(h.Mode))
	switch h.Typeflag {
	case tar.TypeDir:
		if err := x.root.MkdirAll(name, 0o755); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		x.dirs = append(x.dirs, dirMode{name, mode, h.ModTime})
	case tar.TypeReg:
		return x.file(tr, h, name, mode)
	case tar.TypeSymlink:
		if !x.o.Links {
			return nil
		}
		_ = x.root.Remove(name)
		if err := x.root.Symlink(h.Linkname, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		x.chown(name, h)
	case tar.TypeLink:
		if !x.o.Links {
			return nil
		}
		target, ok := clean(h.Linkname)
		if !ok {
			return fmt.Errorf("%s: hard link outside the archive", name)
		}
		_ = x.root.Remove(name)
		if err := x.root.Link(target, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// clean returns name relative to the directory, slash-separated, without a leading "/"; ok is
// false for a name that leaves it. (os.Root refuses what else the OS would read as escaping,
// such as a volume name on Windows.)
func clean(name string) (string, bool) {
	rel := path.Clean(strings.TrimLeft(name, "/"))
	return rel, rel != ".." && !strings.HasPrefix(rel, "../")
}

func (x *extractor) file(tr *tar.Reader, h *tar.Header, name string, mode fs.FileMode) error {
	if x.o.MaxFiles > 0 && x.files >= x.o.MaxFiles {
		return &TooLargeError{fmt.Sprintf("more than %d files", x.o.MaxFiles)}
	}
	var src io.Reader = tr
	if x.o.MaxBytes > 0 {
		if h.Size > x.budget {
			return x.tooManyBytes()
		}
		src = io.LimitReader(tr, x.budget+1)
	}
	_ = x.root.Remove(name)
	f, err := x.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if x.o.MaxBytes > 0 {
		if n > x.budget {
			return x.tooManyBytes()
		}
		x.budget -= n
	}
	x.files++
	x.chown(name, h)
	if !x.o.Modes {
		mode = mode.Perm() | 0o400
	}
	if err := x.root.Chmod(name, mode); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if x.o.Modes {
		_ = x.root.Chtimes(name, h.ModTime, h.ModTime)
	}
	return nil
}

func (x *extractor) tooManyBytes() error {
	return &TooLargeError{fmt.Sprintf("more than %d MiB", x.o.MaxBytes>>20)}
}

func (x *extractor) chown(name string, h *tar.Header) {
	if x.o.Owners {
		_ = x.root.Lchown(name, h.Uid, h.Gid)
	}
}

// applyDirModes sets directory modes and times last, so read-only directories do not block their
// own contents and later entries do not move their times.
func (x *extractor) applyDirModes() error {
	if !x.o.Modes {
		return nil
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.root.Chmod(d.name, d.mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		_ = x.root.Chtimes(d.name, d.mtime, d.mtime)
	}
	return nil
}
