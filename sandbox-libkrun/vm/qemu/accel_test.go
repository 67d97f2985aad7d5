package qemu

import (
	"path/filepath"
	"testing"
)

func fakeDriver(t *testing.T, opt Options) *Driver {
	t.Helper()
	opt.Qemu, opt.Virtiofsd, opt.Kernel, opt.Initrd = "/bin/false", "/bin/true", "/nonexistent/k", "/nonexistent/i"
	d, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestAccelWithoutKVMDevice(t *testing.T) {
	if got := fakeDriver(t, Options{Accel: "auto", KVMDevice: filepath.Join(t.TempDir(), "kvm")}).Name(); got != "qemu-microvm/tcg" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestAccelExplicit(t *testing.T) {
	if got := fakeDriver(t, Options{Accel: "kvm"}).Accel(); got != "kvm" {
		t.Fatalf("Accel() = %q", got)
	}
}

func TestAccelProbeFailureFallsBack(t *testing.T) {
	// With a usable device node but a qemu that fails at once, the probe boot fails: TCG.
	if got := fakeDriver(t, Options{Accel: "auto", KVMDevice: "/dev/null"}).Accel(); got != "tcg" {
		t.Fatalf("Accel() = %q", got)
	}
}
