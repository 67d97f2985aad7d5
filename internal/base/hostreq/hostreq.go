// Package hostreq holds the pure host checks of the sandbox adapter (req H2, H3): the adapter's
// supported targets, read and write access to the KVM device, libcap-ng and the VM firmware in
// ~/.iii/lib. Each failed check is a Problem with its own code and a message that names the fix.
// Nothing here starts a process other than `ldconfig -p`, and nothing writes.
//
// Every input comes through Env, so a caller can check the host as a given process would see it:
// the adapter checks its own environment, `iii doctor` the environment Compose gives the adapter.
// The variables are those the adapter honours: III_KVM_DEVICE (default /dev/kvm), III_LIBCAPNG (a
// path that must exist in place of libcap-ng.so.0), III_LIB_DIR (default ~/.iii/lib) and III_MKFS
// (the mkfs.ext4 that formats VM workers' state disks, instead of looking for one).
package hostreq

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/iiidir"
	"github.com/iii-go/iii/internal/base/platform"
)

// Firmware file names inside the firmware directory.
const (
	KernelFile = "iii-vm-vmlinux"
	InitrdFile = "iii-vm-initramfs.cpio"
)

// AccelKVM is the accelerator under which /dev/kvm is required (the adapter's default on
// Linux); under tcg (software emulation) or auto (KVM when a probe boot works, else tcg) it is
// not.
const AccelKVM = "kvm"

// TCGHint ends every KVM problem: the way to run sandboxes without /dev/kvm.
const TCGHint = "Or run sandboxes under software emulation (slower, no /dev/kvm needed): set `accelerator: tcg` in the adapter's config_override"

// Targets are the hosts sandbox-libkrun is built for (req H1).
var Targets = []string{"aarch64-apple-darwin", "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"}

// Problem is one failed check.
type Problem struct {
	Code    string // an errcode constant: KVM_ACCESS, LIBCAPNG_MISSING, FIRMWARE_MISSING, MKFS_MISSING, UNSUPPORTED_PLATFORM
	Path    string // the file or device concerned, "" when none
	Message string // what is wrong
	Fix     string // how to fix it
	sep     string // joins Message and Fix in String
}

// String is the whole message: what is wrong, then how to fix it.
func (p Problem) String() string { return p.Message + p.sep + p.Fix }

// Env is what the checks read: variables and the home directory.
type Env struct {
	Getenv func(string) string // the caller's environment (os.Getenv in a main); nil is an empty one
	Home   string              // "" asks os.UserHomeDir
}

func (e Env) get(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

// KVMDevice is the KVM device: $III_KVM_DEVICE, else /dev/kvm.
func (e Env) KVMDevice() string {
	if p := e.get("III_KVM_DEVICE"); p != "" {
		return p
	}
	return "/dev/kvm"
}

// FirmwareDir is the firmware directory: $III_LIB_DIR, else ~/.iii/lib.
func (e Env) FirmwareDir() string { return iiidir.Env{Getenv: e.Getenv, Home: e.Home}.Lib() }

// Run performs every check that applies to target t under the accelerator accel ("" is the
// default, kvm) and returns the problems found, in the order platform, KVM, libcap-ng,
// firmware. A target the adapter does not ship for reports only that; the device and library
// checks apply to Linux only, the device check only under kvm.
func Run(e Env, t platform.Target, accel string) []Problem {
	if p := Platform(t); p != nil {
		return []Problem{*p}
	}
	var ps []Problem
	if t.GOOS == "linux" {
		if p := KVM(e.KVMDevice()); p != nil && (accel == "" || accel == AccelKVM) {
			ps = append(ps, *p)
		}
		if p := LibCapNG(e); p != nil {
			ps = append(ps, *p)
		}
	}
	if p := Firmware(e.FirmwareDir()); p != nil {
		ps = append(ps, *p)
	}
	return ps
}

// Platform reports UNSUPPORTED_PLATFORM when the adapter is not built for t (req H3).
func Platform(t platform.Target) *Problem {
	for _, s := range Targets {
		if s == t.Triple {
			return nil
		}
	}
	return &Problem{Code: errcode.UnsupportedPlatform, Path: t.Triple, sep: ". ",
		Message: fmt.Sprintf("sandbox-libkrun has no build for %s. It ships: %s", t.Triple, strings.Join(Targets, ", ")),
		Fix:     fmt.Sprintf("Run the sandboxes and VM workers on one of those hosts; iii itself runs on %s, so projects without them still work here", t.Triple)}
}

// KVM reports KVM_ACCESS when dev cannot be opened for reading and writing (req H2).
func KVM(dev string) *Problem {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return &Problem{Code: errcode.KVMAccess, Path: dev, sep: ". ",
			Message: fmt.Sprintf("KVM not available -- %s does not exist", dev),
			Fix:     "Load the module (`modprobe kvm_intel` or `modprobe kvm_amd`) or enable virtualization in the firmware/hypervisor; under WSL2 enable nested virtualization. " + TCGHint}
	}
	return &Problem{Code: errcode.KVMAccess, Path: dev, sep: ". ",
		Message: fmt.Sprintf("KVM not accessible -- %s exists but this user lacks read/write permission", dev),
		Fix:     "Add your user to the 'kvm' group: sudo usermod -aG kvm $USER, then log in again. " + TCGHint}
}

// libDirs are the standard library directories searched for libcap-ng.so.0.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// LibCapNG reports LIBCAPNG_MISSING when libcap-ng.so.0 is in neither the loader cache nor a
// standard library directory ($III_LIBCAPNG names the one path to look at instead) (req H2).
func LibCapNG(e Env) *Problem {
	missing := &Problem{Code: errcode.LibCapNGMissing, Path: "libcap-ng.so.0", sep: "; ",
		Message: "libcap-ng0 is not installed (libcap-ng.so.0 not found, needed by virtiofsd)",
		Fix:     "install it with `apt-get install libcap-ng0`"}
	if p := e.get("III_LIBCAPNG"); p != "" {
		if _, err := os.Stat(p); err != nil {
			missing.Path = p
			return missing
		}
		return nil
	}
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil && strings.Contains(string(out), "libcap-ng.so.0") {
		return nil
	}
	for _, dir := range libDirs {
		if _, err := os.Stat(filepath.Join(dir, "libcap-ng.so.0")); err == nil {
			return nil
		}
	}
	return missing
}

// Firmware reports FIRMWARE_MISSING when the kernel or the initramfs is not in dir.
func Firmware(dir string) *Problem {
	for _, f := range []string{KernelFile, InitrdFile} {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err != nil {
			return &Problem{Code: errcode.FirmwareMissing, Path: p, sep: "; ",
				Message: fmt.Sprintf("VM firmware missing: %s not found", p),
				Fix:     "the sandbox-libkrun package installs it at start from its firmware/ directory (reinstall the adapter with `iii call compose::restart worker=sandbox-libkrun`), or from a source checkout run `go tool mage build`"}
		}
	}
	return nil
}

// mkfsCandidates are where mkfs.ext4 is looked for after PATH: an adapter that Compose starts
// as an ordinary user often has no sbin directory on PATH, and Homebrew's e2fsprogs is keg-only.
var mkfsCandidates = []string{
	"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4",
	"/opt/homebrew/opt/e2fsprogs/sbin/mkfs.ext4", "/usr/local/opt/e2fsprogs/sbin/mkfs.ext4",
}

// FindMkfs returns the mkfs.ext4 (e2fsprogs) that formats VM workers' state disks: $III_MKFS
// when set (used as it is, even when missing, so that a test or an operator decides), else the
// one on PATH, else one of the usual places; "" when there is none.
func FindMkfs(e Env) string {
	if p := e.get("III_MKFS"); p != "" {
		return p
	}
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p
	}
	for _, p := range mkfsCandidates {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// Mkfs reports MKFS_MISSING when the host has no usable mkfs.ext4: without it a VM worker would
// boot with no state disk and reinstall its dependencies at every boot.
func Mkfs(e Env) *Problem {
	p := FindMkfs(e)
	if p != "" {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return nil
		}
	}
	path := p
	if path == "" {
		path = "mkfs.ext4"
	}
	return &Problem{Code: errcode.MkfsMissing, Path: path, sep: "; ",
		Message: fmt.Sprintf("mkfs.ext4 not found (%s), needed to format each VM worker's state disk", path),
		Fix:     "install e2fsprogs (`apt-get install e2fsprogs`, `brew install e2fsprogs`), or set `worker_disk_mb: 0` in the adapter's config_override to run VM workers without a state disk (their writes outside /workspace are then lost at every stop)"}
}
