package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/iii-go/iii/engine/procgroup"
	"github.com/iii-go/iii/sandbox-libkrun/internal/dirlock"
)

// Root images: a machine whose root is an image directory of the cache boots it from a read-only
// erofs image of that directory on a virtio disk, instead of a virtiofs share: no virtiofsd, no
// FUSE round trip per file, and the guest kernel reads the image in large blocks (measured by
// internal/bench). The image is built once per directory, beside it (<dir>.erofs), and built
// again when the directory is replaced (the cache renames a new one into place).

// MkfsErofsPath is the mkfs.erofs binary ($III_MKFS_EROFS, else mkfs.erofs on PATH).
func MkfsErofsPath() string {
	if p := os.Getenv("III_MKFS_EROFS"); p != "" {
		return p
	}
	return "mkfs.erofs"
}

// rootImageSuffix names a directory's image beside it; the stamp file records which directory it
// was built from.
const rootImageSuffix = ".erofs"

// dirStamp identifies a directory: its device, inode and modification time. A directory renamed
// into its place, or one whose entries changed, has another.
func dirStamp(dir string) (string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return "", errors.New("no inode numbers on this system")
	}
	return fmt.Sprintf("%d:%d:%d\n", sys.Dev, sys.Ino, st.ModTime().UnixNano()), nil
}

// rootImage returns the erofs image of dir (symbolic links resolved), building it with mkfs when
// it is missing or was built from another directory. Concurrent boots, in this process or
// others, build it once: the build runs under a lock beside it, into a temporary file renamed
// into place.
func rootImage(ctx context.Context, mkfs, dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	img := real + rootImageSuffix
	stamp, err := dirStamp(real)
	if err != nil {
		return "", err
	}
	if fresh(img, stamp) {
		return img, nil
	}
	unlock, err := dirlock.Lock(filepath.Dir(real), filepath.Base(img)+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if fresh(img, stamp) {
		return img, nil
	}
	tmp := img + ".tmp-" + strconv.Itoa(os.Getpid())
	defer os.Remove(tmp)
	_ = os.Remove(img + ".stamp")
	cmd := exec.CommandContext(ctx, mkfs, "--quiet", tmp, real)
	cmd.SysProcAttr = procgroup.Attr(true)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := startCmd(cmd); err != nil {
		return "", err
	}
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", mkfs, real, err, tail(out.String(), 4, 512))
	}
	if err := os.Rename(tmp, img); err != nil {
		return "", err
	}
	if err := os.WriteFile(img+".stamp", []byte(stamp), 0o644); err != nil {
		return "", err
	}
	return img, nil
}

// fresh reports whether img exists and its stamp names the directory it is the image of.
func fresh(img, stamp string) bool {
	b, err := os.ReadFile(img + ".stamp")
	if err != nil || string(b) != stamp {
		return false
	}
	_, err = os.Stat(img)
	return err == nil
}
