package hostcheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/internal/base/platform"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
)

var (
	linux  = platform.Parse("x86_64-unknown-linux-gnu")
	darwin = platform.Parse("aarch64-apple-darwin")
)

func find(ps []Problem, check string) *Problem {
	for i := range ps {
		if ps[i].Check == check {
			return &ps[i]
		}
	}
	return nil
}

func TestMissingPieces(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{}
	env["III_QEMU"] = filepath.Join(dir, "no-qemu")
	env["III_VIRTIOFSD"] = filepath.Join(dir, "no-virtiofsd")
	env["III_KVM_DEVICE"] = filepath.Join(dir, "no-kvm")
	env["III_LIBCAPNG"] = filepath.Join(dir, "no-libcap-ng.so.0")
	env["III_LIB_DIR"] = filepath.Join(dir, "lib")
	ps := Run(Config{Getenv: getenvOf(env), Target: linux, Accel: settings.AccelKVM})
	for check, want := range map[string]string{
		"qemu":      "apt-get install " + guestarch.Host().QemuPackage,
		"virtiofsd": "apt-get install qemu-system-common",
		"kvm":       "does not exist",
		"libcap-ng": "apt-get install libcap-ng0",
		"firmware":  "installs it at start",
	} {
		p := find(ps, check)
		if p == nil || !strings.Contains(p.Message, want) {
			t.Errorf("%s: got %v, want a message containing %q", check, p, want)
		}
	}
	err := Err(ps)
	for _, c := range []string{"qemu:", "virtiofsd:", "kvm:", "libcap-ng:", "firmware:"} {
		if err == nil || !strings.Contains(err.Error(), c) {
			t.Fatalf("Err lacks %s: %v", c, err)
		}
	}
}

func TestKVMNeededOnlyUnderKVM(t *testing.T) {
	env := map[string]string{}
	env["III_KVM_DEVICE"] = filepath.Join(t.TempDir(), "no-kvm")
	for _, accel := range []string{settings.AccelTCG, settings.AccelAuto} {
		if p := find(Run(Config{Getenv: getenvOf(env), Target: linux, Accel: accel}), "kvm"); p != nil {
			t.Errorf("accelerator %s: %v", accel, p)
		}
	}
	p := find(Run(Config{Getenv: getenvOf(env), Target: linux, Accel: settings.AccelKVM}), "kvm")
	if p == nil || !strings.Contains(p.Message, "`accelerator: tcg`") {
		t.Fatalf("kvm: %v, want the tcg alternative named", p)
	}
	if p := find(Run(Config{Getenv: getenvOf(env), Target: linux, Accel: settings.AccelHVF}), "accelerator"); p == nil {
		t.Fatal("hvf accepted on Linux")
	}
}

func TestPresentPieces(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"qemu", "virtiofsd"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"kvm", "libcap-ng.so.0", "iii-vm-vmlinux", "iii-vm-initramfs.cpio"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{}
	env["III_QEMU"] = filepath.Join(dir, "qemu")
	env["III_VIRTIOFSD"] = filepath.Join(dir, "virtiofsd")
	env["III_KVM_DEVICE"] = filepath.Join(dir, "kvm")
	env["III_LIBCAPNG"] = filepath.Join(dir, "libcap-ng.so.0")
	env["III_LIB_DIR"] = dir
	if ps := Run(Config{Getenv: getenvOf(env), Target: linux, Accel: settings.AccelKVM}); len(ps) != 0 && !qemuNestedPVMOnly(ps) {
		t.Fatalf("problems on a complete host: %v", ps)
	}
}

// qemuNestedPVMOnly reports whether the only problem is this host's nested PVM KVM, which the
// kvm accelerator rightly refuses even with a stand-in device.
func qemuNestedPVMOnly(ps []Problem) bool {
	return len(ps) == 1 && ps[0].Check == "kvm" && strings.Contains(ps[0].Message, "nested PVM")
}

// Apple Silicon: each missing piece names its fix (Homebrew's qemu, Hypervisor.framework, the
// firmware); there is no virtiofsd, /dev/kvm or libcap-ng check.
func TestDarwinMissingPieces(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{}
	env["III_QEMU"] = filepath.Join(dir, "qemu-system-aarch64")
	env["III_LIB_DIR"] = filepath.Join(dir, "lib")
	env["III_LIBCAPNG"] = filepath.Join(dir, "no-libcap-ng.so.0")
	ps := Run(Config{Getenv: getenvOf(env), Target: darwin, Accel: settings.AccelHVF, Arch: guestarch.AArch64, HVF: func() bool { return false }})
	for check, want := range map[string]string{
		"qemu":     "qemu-system-aarch64 not found on PATH nor in /opt/homebrew/bin); install it with `brew install qemu`",
		"hvf":      "Hypervisor.framework is not available",
		"firmware": "VM firmware missing: " + filepath.Join(dir, "lib", "iii-vm-vmlinux"),
	} {
		if p := find(ps, check); p == nil || !strings.Contains(p.Message, want) {
			t.Errorf("%s: got %v, want a message containing %q", check, p, want)
		}
	}
	for _, c := range []string{"virtiofsd", "kvm", "libcap-ng", "platform"} {
		if p := find(ps, c); p != nil {
			t.Errorf("darwin checks %s: %v", c, p)
		}
	}
	if p := find(Run(Config{Getenv: getenvOf(env), Target: darwin, Accel: settings.AccelKVM, HVF: func() bool { return true }}), "accelerator"); p == nil {
		t.Error("kvm accepted on macOS")
	}
	if p := find(Run(Config{Getenv: getenvOf(env), Target: darwin, Accel: settings.AccelHVF, Share: settings.ShareVirtiofs, HVF: func() bool { return true }}), "virtiofsd"); p == nil || !strings.Contains(p.Message, "file_share: 9p") {
		t.Errorf("virtiofs on macOS: %v", p)
	}
}

// A ready Apple Silicon host: qemu, HVF and an aarch64 firmware that mounts 9p.
func TestDarwinReady(t *testing.T) {
	dir := t.TempDir()
	writeFirmware(t, dir, firmware.Manifest{Arch: "aarch64", Shares: []string{"virtiofs", "9p"}})
	qemuBin := filepath.Join(dir, "qemu-system-aarch64")
	if err := os.WriteFile(qemuBin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	env["III_QEMU"] = qemuBin
	env["III_LIB_DIR"] = dir
	if ps := Run(Config{Getenv: getenvOf(env), Target: darwin, Accel: settings.AccelHVF, HVF: func() bool { return true }}); len(ps) != 0 {
		t.Fatalf("problems on a ready Mac: %v", ps)
	}
}

// Musl Linux and Intel Macs have no adapter build: UNSUPPORTED_PLATFORM and nothing else (req H3).
func TestUnsupportedPlatforms(t *testing.T) {
	for _, triple := range []string{"x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl", "x86_64-apple-darwin"} {
		ps := Run(Config{Getenv: os.Getenv, Target: platform.Parse(triple), Accel: settings.AccelTCG})
		if len(ps) != 1 || ps[0].Check != "platform" || !strings.Contains(ps[0].Message, "UNSUPPORTED_PLATFORM") || !strings.Contains(ps[0].Message, triple) {
			t.Errorf("%s: %v", triple, ps)
		}
	}
}

// A guest of another architecture needs its own firmware in <lib>/<arch>/, built for it; a
// firmware without 9p cannot serve file_share 9p.
func TestForeignArchFirmware(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{}
	env["III_LIB_DIR"] = dir
	c := Config{Getenv: getenvOf(env), Target: linux, Accel: settings.AccelTCG, Arch: guestarch.AArch64, Share: settings.Share9P}
	p := find(Run(c), "firmware")
	if p == nil || !strings.Contains(p.Message, "VM firmware for aarch64 guests missing: "+filepath.Join(dir, "aarch64", "iii-vm-vmlinux")) ||
		!strings.Contains(p.Message, "firmware-aarch64/ beside its binary") || !strings.Contains(p.Message, "dist/firmware/aarch64-unknown-linux-gnu/") {
		t.Fatalf("missing aarch64 firmware: %v", p)
	}
	writeFirmware(t, filepath.Join(dir, "aarch64"), firmware.Manifest{KernelRelease: "k", Arch: "x86_64", Shares: []string{"virtiofs"}})
	var msgs []string
	for _, p := range Run(c) {
		if p.Check == "firmware" {
			msgs = append(msgs, p.Message)
		}
	}
	if len(msgs) != 2 || !strings.Contains(msgs[0], "is for x86_64 guests, not aarch64") || !strings.Contains(msgs[1], "(kernel k) cannot mount a 9p share: its kernel has no 9p modules; set `file_share: virtiofs`") {
		t.Fatalf("wrong firmware: %q", msgs)
	}
}

func writeFirmware(t *testing.T, dir string, m firmware.Manifest) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{firmware.KernelFile, firmware.InitrdFile} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, firmware.ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// With state disks on (worker_disk_mb > 0), a host without mkfs.ext4 fails the host check
// (MKFS_MISSING) instead of booting VM workers without their disk; with them off it is not needed.
func TestMkfsNeededForStateDisks(t *testing.T) {
	env := map[string]string{}
	env["III_MKFS"] = filepath.Join(t.TempDir(), "no-mkfs.ext4")
	ps := Run(Config{Getenv: getenvOf(env), Target: linux, Accel: settings.AccelTCG, StateDisk: true})
	p := find(ps, "mkfs")
	if p == nil || !p.Fatal || !strings.Contains(p.Message, "MKFS_MISSING") || !strings.Contains(p.Message, "worker_disk_mb: 0") {
		t.Fatalf("mkfs problem %+v", p)
	}
	if err := Err(ps); err == nil || !strings.Contains(err.Error(), "mkfs: mkfs.ext4 not found") {
		t.Fatalf("Err = %v", err)
	}
	if p := find(Run(Config{Getenv: getenvOf(env), Target: linux, Accel: settings.AccelTCG}), "mkfs"); p != nil {
		t.Fatalf("mkfs checked with state disks off: %+v", p)
	}
}

// getenvOf is the lookup of the variables env, as the adapter's main hands os.Getenv down.
func getenvOf(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}
