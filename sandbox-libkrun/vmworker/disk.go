package vmworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/iii-go/iii/internal/base/hostreq"
)

// DiskFile is the name of a VM worker's state disk in its state directory: a sparse raw image
// holding one ext4 file system, the upper layer of the guest's root, so what the worker writes
// outside its directory (installed packages, caches) is there at its next boot.
const DiskFile = "disk.img"

// mkfsTimeout bounds one mkfs.ext4 run; formatting a sparse image takes well under a second.
const mkfsTimeout = time.Minute

// FindMkfs returns the host's mkfs.ext4 (e2fsprogs), or "" when there is none: $III_MKFS of
// getenv (the adapter's environment; nil is an empty one), else PATH, else the usual places
// (hostreq.FindMkfs, which the host checks use too).
func FindMkfs(getenv func(string) string) string {
	return hostreq.FindMkfs(hostreq.Env{Getenv: getenv})
}

// getenvOf is the variable lookup of env, a KEY=VALUE list (the last entry of a key wins, as
// for a process).
func getenvOf(env []string) func(string) string {
	return func(k string) string {
		v := ""
		for _, kv := range env {
			if name, val, ok := strings.Cut(kv, "="); ok && name == k {
				v = val
			}
		}
		return v
	}
}

// errNoMkfs means the host cannot format a state disk.
var errNoMkfs = errors.New("mkfs.ext4 not found: install e2fsprogs (apt-get install e2fsprogs; brew install e2fsprogs)")

// ensureDisk returns the state disk in the state directory dir, formatting a sparse image of
// sizeMB MiB with mkfs when there is none yet. The host formats it, not the guest: the agent's
// initramfs has no mkfs, and formatting here costs milliseconds instead of emulated guest time.
// The image is built under a temporary name and renamed, so a failed format leaves no disk that
// a later boot would take for a formatted one. An existing disk smaller than sizeMB is made
// larger (the file only: the guest grows its file system online at boot, see vm.Spec.Disk); a
// larger one is kept, since shrinking could lose what the worker wrote.
func ensureDisk(ctx context.Context, dir string, sizeMB int, mkfs string, env []string) (path string, change diskChange, err error) {
	path = filepath.Join(dir, DiskFile)
	size := int64(sizeMB) << 20
	if st, err := os.Stat(path); err == nil {
		switch {
		case !st.Mode().IsRegular():
			return "", 0, fmt.Errorf("%s is not a file", path)
		case st.Size() < size:
			if err := os.Truncate(path, size); err != nil {
				return "", 0, err
			}
			return path, diskGrown, nil
		case st.Size() > size:
			return path, diskLarger, nil
		}
		return path, diskKept, nil
	} else if !os.IsNotExist(err) {
		return "", 0, err
	}
	if mkfs == "" {
		return "", 0, errNoMkfs
	}
	tmp := path + ".new"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", 0, err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = format(ctx, mkfs, tmp, env)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", 0, err
	}
	return path, diskCreated, nil
}

// diskChange is what ensureDisk did to a state disk.
type diskChange int

const (
	diskKept    diskChange = iota // there, of the asked size
	diskCreated                   // formatted now
	diskGrown                     // made larger
	diskLarger                    // larger than asked, kept as it is
)

// format makes an ext4 file system on the image at path. Root owns its root directory (as in
// any image); the inode tables and journal are left lazy so the sparse file stays small (the
// guest mounts it with noinit_itable); no blocks are reserved for root, since the worker is root.
// mkfs runs with the environment env (the adapter's) and LC_ALL=C, so its messages are the same
// on every host.
func format(ctx context.Context, mkfs, path string, env []string) error {
	ctx, cancel := context.WithTimeout(ctx, mkfsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, mkfs, "-q", "-F", "-t", "ext4", "-L", "iii-state", "-m", "0",
		"-E", "root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1,nodiscard", path)
	cmd.Env = append(env[:len(env):len(env)], "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", mkfs, filepath.Base(path), err, strings.TrimSpace(string(out)))
	}
	return nil
}
