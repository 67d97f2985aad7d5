//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iii-go/iii/internal/base/unixmode"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

func mountPseudo() error {
	for _, m := range []struct{ src, dst, typ string }{
		{"devtmpfs", "/dev", "devtmpfs"},
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.typ, 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	return nil
}

// loadModules loads, in order, the modules named one per line in the file list (paths relative
// to its directory). A module already present (built in or loaded) is skipped.
func loadModules(list string) error {
	dir := filepath.Dir(list)
	f, err := os.Open(list)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" {
			continue
		}
		if err := loadModule(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("load module %s: %w", name, err)
		}
	}
	return sc.Err()
}

func loadModule(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	err = unix.FinitModule(fd, "", 0)
	if err == unix.EEXIST {
		return nil
	}
	return err
}

// openPort waits for the virtio-serial port called name to appear and opens it read-write.
func openPort(name string, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		matches, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(m))
			f, err := os.OpenFile(dev, os.O_RDWR, 0)
			if err == nil {
				return f, nil
			}
			if !os.IsNotExist(err) {
				return nil, err
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("virtio-serial port %q did not appear within %s", name, wait)
		}
		// The node appears a few milliseconds after virtio_console loads; the boot waits on it.
		time.Sleep(time.Millisecond)
	}
}

// blockRoot is the device of a root on virtio-blk: the machine's first and only disk.
const blockRoot = "/dev/vda"

// waitDevice waits for the device node path to appear (devtmpfs creates it as the driver binds).
func waitDevice(path string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", path, wait)
		}
		time.Sleep(time.Millisecond)
	}
}

// shareOpts are the mount options of a share of fsType. 9p: the read-only root is cached in the
// guest (it never changes under it); writable mounts cache only what mmap needs, so the host's
// changes show at once. virtiofs needs none.
func shareOpts(fsType string, readOnly bool) string {
	if fsType != "9p" {
		return ""
	}
	o := "trans=virtio,version=9p2000.L,msize=524288,cache=mmap"
	if readOnly {
		o = "trans=virtio,version=9p2000.L,msize=524288,cache=loose"
	}
	return o
}

// findStateDisk waits for the virtio block device whose serial is proto.StateDiskSerial and returns
// its device node.
func findStateDisk(wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		matches, _ := filepath.Glob("/sys/block/vd*/serial")
		for _, m := range matches {
			if b, err := os.ReadFile(m); err == nil && strings.TrimSpace(string(b)) == proto.StateDiskSerial {
				dev := "/dev/" + filepath.Base(filepath.Dir(m))
				if _, err := os.Stat(dev); err == nil {
					return dev, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the state disk (virtio serial %q) did not appear within %s", proto.StateDiskSerial, wait)
		}
		time.Sleep(time.Millisecond)
	}
}

// mountStateDisk loads the block device and ext4 modules, waits for the state disk and mounts
// it at dir. noinit_itable: the host formats the disk with lazy inode tables on a sparse file
// (they read as zeros), so the kernel need not spend emulated CPU zeroing them.
func mountStateDisk(dir string) error {
	if err := loadModules("/lib/modules/order.disk"); err != nil {
		return fmt.Errorf("state disk modules: %w", err)
	}
	dev, err := findStateDisk(10 * time.Second)
	if err != nil {
		return err
	}
	if err := unix.Mount(dev, dir, "ext4", unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable"); err != nil {
		return fmt.Errorf("mount state disk %s: %w", dev, err)
	}
	if err := growStateDisk(dev, dir); err != nil {
		// The disk is usable at its old size; the console (the boot error's tail) says why.
		fmt.Fprintf(os.Stderr, "guest agent: growing the state disk: %v\n", err)
	}
	return nil
}

// ext4IocResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow a mounted ext4 to a block
// count.
const ext4IocResizeFS = 0x40086610

// growStateDisk grows the ext4 mounted at dir online to fill its device dev: the host makes the
// image larger when worker_disk_mb grows. A file system as large as its device is left as it is
// (the kernel does nothing for an unchanged block count).
func growStateDisk(dev, dir string) error {
	d, err := os.Open(dev)
	if err != nil {
		return err
	}
	var size uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, d.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
	d.Close()
	if errno != 0 {
		return fmt.Errorf("size of %s: %w", dev, errno)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	blocks := size / uint64(st.Bsize)
	m, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer m.Close()
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, m.Fd(), ext4IocResizeFS, uintptr(unsafe.Pointer(&blocks))); errno != 0 {
		return fmt.Errorf("resize to %d blocks: %w", blocks, errno)
	}
	return nil
}

// setupRoot assembles the sandbox root at /newroot from shares of fsType (virtiofs or 9p) and
// chroots into it. The overlay's upper layer is a tmpfs of scratchMB MiB, or with stateDisk the
// state disk, whose writes outlive the machine; /run and /tmp then stay in memory, so the
// project token handed to a VM worker (/run/iii/token) and its temporary files never reach it.
func setupRoot(fsType, rootTag string, scratchMB int, stateDisk bool, mounts []mountReq) error {
	if scratchMB <= 0 {
		scratchMB = 256
	}
	if err := mountOverlay(fsType, rootTag, scratchMB, stateDisk); err != nil {
		return err
	}
	if err := mountSystem(scratchMB, stateDisk); err != nil {
		return err
	}
	if err := mountShares(fsType, mounts); err != nil {
		return err
	}
	return switchRoot()
}

// mountOverlay mounts at /newroot the overlay of the image root (the share rootTag, read-only,
// at /lower) under an upper layer at /scratch: a tmpfs of scratchMB MiB, or the state disk.
func mountOverlay(fsType, rootTag string, scratchMB int, stateDisk bool) error {
	for _, d := range []string{"/lower", "/scratch", "/newroot"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount(rootTag, "/lower", fsType, unix.MS_RDONLY|unix.MS_NODEV, shareOpts(fsType, true)); err != nil {
		return fmt.Errorf("mount %s root %q: %w", fsType, rootTag, err)
	}
	if stateDisk {
		if err := mountStateDisk("/scratch"); err != nil {
			return err
		}
	} else if err := unix.Mount("scratch", "/scratch", "tmpfs", unix.MS_NODEV, fmt.Sprintf("size=%dm,mode=0755", scratchMB)); err != nil {
		return fmt.Errorf("mount scratch tmpfs: %w", err)
	}
	for _, d := range []string{"/scratch/upper", "/scratch/work"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := "lowerdir=/lower,upperdir=/scratch/upper,workdir=/scratch/work"
	if err := unix.Mount("overlay", "/newroot", "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	return nil
}

// mountSystem mounts the kernel's file systems (proc, sys, dev, dev/shm, dev/pts) in the new
// root, with stateDisk /run and /tmp as tmpfs of scratchMB MiB, and makes /tmp world-writable
// and sticky.
func mountSystem(scratchMB int, stateDisk bool) error {
	for _, m := range []struct{ src, dst, typ, opts string }{
		{"proc", "proc", "proc", ""},
		{"sysfs", "sys", "sysfs", ""},
		{"devtmpfs", "dev", "devtmpfs", ""},
		{"shm", "dev/shm", "tmpfs", "mode=1777"},
		{"devpts", "dev/pts", "devpts", "newinstance,ptmxmode=0666"},
	} {
		dst := filepath.Join("/newroot", m.dst)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, dst, m.typ, 0, m.opts); err != nil {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	if stateDisk {
		for _, m := range []struct{ dst, mode string }{{"run", "0755"}, {"tmp", "1777"}} {
			dst := filepath.Join("/newroot", m.dst)
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, fmt.Sprintf("size=%dm,mode=%s", scratchMB, m.mode)); err != nil {
				return fmt.Errorf("mount /%s tmpfs: %w", m.dst, err)
			}
		}
	}
	// /tmp is world-writable and sticky. A chmod copies the image's /tmp up into the overlay,
	// so only when its mode is not right yet.
	tmpMode := unixmode.FileMode(0o1777)
	if err := os.MkdirAll("/newroot/tmp", tmpMode); err == nil {
		if st, err := os.Stat("/newroot/tmp"); err != nil || unixmode.Bits(st.Mode()) != 0o1777 {
			_ = os.Chmod("/newroot/tmp", tmpMode)
		}
	}
	return nil
}

// mountShares mounts each of the sandbox's mounts, shares of fsType, at its path in the new
// root, read-only when asked.
func mountShares(fsType string, mounts []mountReq) error {
	for _, m := range mounts {
		dst := filepath.Join("/newroot", filepath.Clean("/"+m.Path))
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", m.Path, err)
		}
		var flags uintptr = unix.MS_NODEV
		if m.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount(m.Tag, dst, fsType, flags, shareOpts(fsType, m.ReadOnly)); err != nil {
			return fmt.Errorf("mount %s %q at %s: %w", fsType, m.Tag, m.Path, err)
		}
	}
	return nil
}

// switchRoot moves /newroot over / and chroots into it, so no path leads back to the
// initramfs.
func switchRoot() error {
	if err := unix.Chdir("/newroot"); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}
