package vmworker

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// hiddenDir is never copied into a VM: the compose file's .iii/ holds the project token.
const hiddenDir = ".iii"

// mirror brings dst up to date with src: directories, regular files and symlinks are copied
// (a file only when its size or modification time differ), every directory named .iii is
// skipped, and files that exist only in dst are kept (they are the VM's own state).
func mirror(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == hiddenDir && rel != "." {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if cur, err := os.Readlink(target); err == nil && cur == link {
				return nil
			}
			os.RemoveAll(target)
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			if st, err := os.Lstat(target); err == nil && st.Mode().IsRegular() && st.Size() == info.Size() && st.ModTime().Equal(info.ModTime()) {
				return nil
			}
			return copyFile(path, target, info)
		}
		return nil // sockets, devices and pipes stay on the host
	})
}

func copyFile(src, dst string, info fs.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	os.RemoveAll(dst)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chtimes(dst, info.ModTime(), info.ModTime())
}
