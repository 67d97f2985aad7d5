package qemu

import (
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

func argsOf(t *testing.T, opt Options, accel string, spec vm.Spec, socks []string) string {
	t.Helper()
	opt.Accel = accel
	d := fakeDriver(t, opt)
	return strings.Join(d.qemuArgs(qemuConfig{spec: spec, accel: accel, vfsSocks: socks, ctrlSock: "/run/c,trl.sock"}), " ")
}

func has(t *testing.T, args string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(args, w) {
			t.Errorf("command line lacks %q:\n%s", w, args)
		}
	}
}

func hasNot(t *testing.T, args string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(args, w) {
			t.Errorf("command line has %q:\n%s", w, args)
		}
	}
}

func TestArgsX86Virtiofs(t *testing.T) {
	spec := vm.Spec{RootFS: "/img", CPUs: 2, MemoryMB: 256}
	a := argsOf(t, Options{Arch: guestarch.X86_64, Share: ShareVirtiofs}, "tcg", spec, []string{"/run/vfs0.sock"})
	has(t, a, "-accel tcg,thread=multi", "-M microvm,memory-backend=mem", "memory-backend-memfd,id=mem,size=256M,share=on",
		"virtio-mmio.force-legacy=false", "vhost-user-fs-device,chardev=vfs0,tag=root", "console=ttyS0", "tsc_early_khz",
		"path=/run/c,,trl.sock,server=on", "-device virtio-serial-device,max_ports=2 ", "virtserialport,chardev=ctrl,name=ctrl")
	hasNot(t, a, "-cpu", "virtio-9p")
}

func TestArgsAArch64(t *testing.T) {
	spec := vm.Spec{RootFS: "/img", CPUs: 1, MemoryMB: 128}
	tcg := argsOf(t, Options{Arch: guestarch.AArch64, Share: ShareVirtiofs}, "tcg", spec, []string{"/run/vfs0.sock"})
	has(t, tcg, "-accel tcg -cpu cortex-a72", "-M virt,gic-version=3,memory-backend=mem", "vhost-user-fs-device", "console=ttyAMA0")
	hasNot(t, tcg, "tsc_early_khz", "ttyS0", "8250")
	kvm := argsOf(t, Options{Arch: guestarch.AArch64, Share: ShareVirtiofs}, "kvm", spec, []string{"/run/vfs0.sock"})
	has(t, kvm, "-accel kvm -cpu host", "-M virt,gic-version=host,memory-backend=mem")
}

// The macOS command line: HVF, the virt machine, the image and mounts over virtio-9p served by
// qemu (read-only where asked), no shared-memory backend and no virtiofsd.
func TestArgsDarwinHVF9P(t *testing.T) {
	spec := vm.Spec{RootFS: "/Users/me/.iii/cache/img", CPUs: 1, MemoryMB: 512, Network: true,
		Mounts: []vm.Mount{{Host: "/Users/me/proj,1", Guest: "/work"}}}
	a := argsOf(t, Options{Arch: guestarch.AArch64, Share: Share9P}, "hvf", spec, nil)
	has(t, a, "-accel hvf -cpu host", "-M virt,gic-version=3 ",
		"-fsdev local,id=fs0,path=/Users/me/.iii/cache/img,security_model=none,readonly=on -device virtio-9p-device,fsdev=fs0,mount_tag=root",
		"-fsdev local,id=fs1,path=/Users/me/proj,,1,security_model=none -device virtio-9p-device,fsdev=fs1,mount_tag=m1",
		"-netdev user,id=net0 -device virtio-net-device,netdev=net0")
	hasNot(t, a, "memory-backend", "vhost-user", "fs1,path=/Users/me/proj,,1,security_model=none,readonly")
}

func TestNameAndDefaults(t *testing.T) {
	d := fakeDriver(t, Options{Arch: guestarch.AArch64, Share: Share9P, Accel: "tcg"})
	if d.Name() != "qemu-virt/tcg/9p" {
		t.Fatalf("Name() = %q", d.Name())
	}
	if DefaultShare("darwin") != Share9P || DefaultShare("linux") != ShareVirtiofs {
		t.Fatal("default shares")
	}
	if QemuInstall("darwin", guestarch.AArch64) != "brew install qemu" || QemuInstall("linux", guestarch.AArch64) != "apt-get install qemu-system-arm" {
		t.Fatal("install hints")
	}
	if _, err := New(Options{Share: "nfs", Kernel: "k", Initrd: "i", Qemu: "/bin/false"}); err == nil {
		t.Fatal("unknown share accepted")
	}
}

// A guest of another architecture than the host's runs under TCG whatever the host offers.
func TestAutoForeignArchIsTCG(t *testing.T) {
	other := guestarch.AArch64
	if other.Native() {
		other = guestarch.X86_64
	}
	if got := fakeDriver(t, Options{Arch: other, Accel: "auto", KVMDevice: "/dev/null"}).Accel(); got != "tcg" {
		t.Fatalf("Accel() = %q", got)
	}
}

// A machine whose root is a disk image (one that can be snapshotted) has no vhost-user device
// and no shared RAM, under every accelerator; a restore waits for its snapshot, and one of a
// parked machine's whole stream (no RAM file) loads it into plain memory named as the saved
// machine's.
func TestArgsRootDisk(t *testing.T) {
	spec := vm.Spec{RootDisk: "/snap/ro,ot.ext4", CPUs: 1, MemoryMB: 512}
	for _, arch := range []guestarch.Arch{guestarch.X86_64, guestarch.AArch64} {
		for _, accel := range []string{"tcg", "kvm"} {
			d := fakeDriver(t, Options{Arch: arch, Share: ShareVirtiofs, Accel: accel})
			a := strings.Join(d.qemuArgs(qemuConfig{spec: spec, accel: accel, ctrlSock: "/run/ctrl.sock", qmpSock: "/run/qmp.sock", incoming: true}), " ")
			has(t, a, "-drive file=/snap/ro,,ot.ext4,format=raw,if=none,id=root,readonly=on", "-device virtio-blk-device,drive=root",
				"-qmp unix:/run/qmp.sock,server=on,wait=off", "-incoming defer", "virtserialport,chardev=ctrl,name=ctrl")
			has(t, a, "-object memory-backend-ram,id=mem,size=512M", ",memory-backend=mem -drive")
			hasNot(t, a, "memory-backend-file", "vhost-user", "virtio-9p", "force-legacy")
			// A snapshot's RAM file: shared by the machine that is saved, private in each copy.
			restored := strings.Join(d.qemuArgs(qemuConfig{spec: spec, accel: accel, ctrlSock: "/run/ctrl.sock", incoming: true, ram: "/snap/r,am.img"}), " ")
			has(t, restored, "-object memory-backend-file,id=mem,size=512M,mem-path=/snap/r,,am.img,share=off", ",memory-backend=mem -drive")
			saved := strings.Join(d.qemuArgs(qemuConfig{spec: spec, accel: accel, ctrlSock: "/run/ctrl.sock", ram: "/snap/ram.img", ramShared: true}), " ")
			has(t, saved, "mem-path=/snap/ram.img,share=on")
		}
	}
	d := fakeDriver(t, Options{Arch: guestarch.X86_64, Share: ShareVirtiofs})
	hasNot(t, strings.Join(d.qemuArgs(qemuConfig{spec: spec, accel: "tcg", ctrlSock: "/run/ctrl.sock"}), " "), "-qmp", "-incoming", "memory-backend")
}
