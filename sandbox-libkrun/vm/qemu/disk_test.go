package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// A state disk is one virtio block device on both machines and both shares, with host write
// errors reported to the guest (never a paused VM); without one there is no block device.
func TestArgsStateDisk(t *testing.T) {
	want := "-drive file=/home/u/.iii/sandbox/workers/a,,b/disk.img,if=none,id=statedisk,format=raw,discard=unmap,werror=report,rerror=report -device virtio-blk-device,drive=statedisk,serial=iii-state"
	for _, opt := range []Options{{Arch: guestarch.X86_64, Share: ShareVirtiofs}, {Arch: guestarch.AArch64, Share: Share9P}} {
		spec := vm.Spec{RootFS: "/img", CPUs: 1, MemoryMB: 256, Disk: "/home/u/.iii/sandbox/workers/a,b/disk.img"}
		has(t, argsOf(t, opt, "tcg", spec, []string{"/run/vfs0.sock"}), want)
		spec.Disk = ""
		hasNot(t, argsOf(t, opt, "tcg", spec, []string{"/run/vfs0.sock"}), "-drive", "virtio-blk")
	}
}

// Init asks the guest for the state disk exactly when the spec has one.
func TestInitStateDisk(t *testing.T) {
	d := fakeDriver(t, Options{Arch: guestarch.X86_64})
	for _, disk := range []string{"", "/d.img"} {
		in, err := d.initFor(vm.Spec{ScratchMB: 64, Disk: disk})
		if err != nil {
			t.Fatal(err)
		}
		if in.StateDisk != (disk != "") {
			t.Fatalf("Disk %q: Init.StateDisk = %v", disk, in.StateDisk)
		}
	}
}

// A state disk that is missing or not a file fails the boot before any process starts.
func TestCheckSpecStateDisk(t *testing.T) {
	dir := t.TempDir()
	spec := vm.Spec{RootFS: dir, MemoryMB: 128}
	for _, disk := range []string{filepath.Join(dir, "none.img"), dir} {
		spec.Disk = disk
		if _, err := checkSpec(spec); err == nil || !strings.Contains(err.Error(), "state disk") {
			t.Fatalf("disk %s: %v", disk, err)
		}
	}
	spec.Disk = filepath.Join(dir, "disk.img")
	if err := os.WriteFile(spec.Disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := checkSpec(spec); err != nil {
		t.Fatal(err)
	}
}
