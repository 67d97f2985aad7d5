package snapshot

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// Mkfs is the mke2fs front end that builds root disks (e2fsprogs, on every Debian system).
var Mkfs = "mkfs.ext4"

// BuildRootDisk writes dst, a journal-less ext4 image holding a copy of the directory root (the
// guest mounts it read-only). It is written beside dst and renamed into place, mode 0600.
func BuildRootDisk(ctx context.Context, root, dst string) error {
	var bytes, inodes int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		inodes++
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				bytes += (info.Size() + 4095) &^ 4095
			}
		} else if d.IsDir() {
			bytes += 4096
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("root disk of %s: %w", root, err)
	}
	// Room for the file system's own metadata (inode tables, bitmaps, directories' blocks).
	sizeKB := (bytes+bytes/8+inodes*256)/1024 + 16*1024
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	tmpPath := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpPath)
	cmd := exec.CommandContext(ctx, Mkfs, "-q", "-F", "-b", "4096", "-m", "0",
		"-O", "^has_journal,^resize_inode", "-N", strconv.FormatInt(inodes+inodes/8+64, 10),
		"-E", "root_owner=0:0", "-L", "iii-root", "-d", root, tmpPath, strconv.FormatInt(sizeKB, 10)+"k")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("root disk of %s: %s: %w\n%s", root, Mkfs, err, out)
	}
	if err := os.Chmod(tmpPath, 0o600); err != nil {
		return err
	}
	return os.Rename(tmpPath, dst)
}
