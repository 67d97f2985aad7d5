//go:build linux

package qemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// aarch64Driver returns a driver for aarch64 guests over 9p (the Apple Silicon machine; under TCG
// on an x86_64 host) with the firmware mage builds, or skips with the reason it cannot.
func aarch64Driver(t *testing.T) (*Driver, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("VM boots are slow under TCG; skipped with -short")
	}
	fw := firmware.At(filepath.Join("..", "..", "..", "dist", "firmware", guestarch.AArch64.Triple))
	if _, err := os.Stat(fw.Manifest); err != nil {
		t.Skipf("no aarch64 firmware in %s (go tool mage firmware)", fw.Dir)
	}
	if _, err := exec.LookPath(guestarch.AArch64.Qemu); err != nil {
		t.Skip("qemu-system-aarch64 is not installed (apt-get install qemu-system-arm)")
	}
	cache := image.NewCacheFor(image.DirFor(image.DefaultDir(os.Getenv), guestarch.AArch64), guestarch.AArch64)
	root, ok := cache.RootFS("docker.io/iiidev/python:latest")
	if !ok {
		t.Skipf("no aarch64 python preset in %s (go tool mage images)", cache.Dir)
	}
	accel := "tcg"
	if guestarch.AArch64.Native() {
		accel = "auto"
	}
	d, err := New(Options{Arch: guestarch.AArch64, Share: Share9P, Accel: accel, Kernel: fw.Kernel, Initrd: fw.Initrd})
	if err != nil {
		t.Skipf("no aarch64 driver: %v", err)
	}
	return d, root
}

// Over 9p a writable mount carries the guest's writes to the host and the host's files to the
// guest; a read-only one is refused by qemu even when the guest kernel remounts it read-write.
func TestNinePMounts(t *testing.T) {
	d, root := aarch64Driver(t)
	rw, ro := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(rw, "from-host.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := boot(t, d, vm.Spec{RootFS: root, Mounts: []vm.Mount{{Host: rw, Guest: "/work"}, {Host: ro, Guest: "/ro", ReadOnly: true}}})
	res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "uname -m; cat /work/from-host.txt; echo guest > /work/from-guest.txt"}})
	if code(res) != 0 || string(res.Stdout) != "aarch64\nhost\n" {
		t.Fatalf("rw mount: %d %q %q", code(res), res.Stdout, res.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "from-guest.txt")); err != nil || string(b) != "guest\n" {
		t.Fatalf("the guest's write did not reach the host: %q %v", b, err)
	}
	res = run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "mount -o remount,rw /ro && echo x > /ro/escape"}})
	if code(res) == 0 {
		t.Fatalf("a write through a read-only 9p share succeeded: %q", res.Stdout)
	}
	if _, err := os.Stat(filepath.Join(ro, "escape")); err == nil {
		t.Fatal("the guest wrote into the read-only share on the host")
	}
	t.Logf("read-only share refused: %s", strings.TrimSpace(string(res.Stderr)))
}
