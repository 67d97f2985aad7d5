package hostcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/settings"
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
	t.Setenv("III_QEMU", filepath.Join(dir, "no-qemu"))
	t.Setenv("III_VIRTIOFSD", filepath.Join(dir, "no-virtiofsd"))
	t.Setenv("III_KVM_DEVICE", filepath.Join(dir, "no-kvm"))
	t.Setenv("III_LIBCAPNG", filepath.Join(dir, "no-libcap-ng.so.0"))
	t.Setenv("III_LIB_DIR", filepath.Join(dir, "lib"))
	ps := Run(settings.AccelKVM)
	for check, want := range map[string]string{
		"qemu":      "apt-get install qemu-system-x86",
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
	t.Setenv("III_KVM_DEVICE", filepath.Join(t.TempDir(), "no-kvm"))
	for _, accel := range []string{settings.AccelTCG, settings.AccelAuto} {
		if p := find(Run(accel), "kvm"); p != nil {
			t.Errorf("accelerator %s: %v", accel, p)
		}
	}
	p := find(Run(settings.AccelKVM), "kvm")
	if p == nil || !strings.Contains(p.Message, "`accelerator: tcg`") {
		t.Fatalf("kvm: %v, want the tcg alternative named", p)
	}
	if p := find(Run(settings.AccelHVF), "accelerator"); p == nil {
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
	t.Setenv("III_QEMU", filepath.Join(dir, "qemu"))
	t.Setenv("III_VIRTIOFSD", filepath.Join(dir, "virtiofsd"))
	t.Setenv("III_KVM_DEVICE", filepath.Join(dir, "kvm"))
	t.Setenv("III_LIBCAPNG", filepath.Join(dir, "libcap-ng.so.0"))
	t.Setenv("III_LIB_DIR", dir)
	if ps := Run(settings.AccelKVM); len(ps) != 0 && !qemuNestedPVMOnly(ps) {
		t.Fatalf("problems on a complete host: %v", ps)
	}
}

// qemuNestedPVMOnly reports whether the only problem is this host's nested PVM KVM, which the
// kvm accelerator rightly refuses even with a stand-in device.
func qemuNestedPVMOnly(ps []Problem) bool {
	return len(ps) == 1 && ps[0].Check == "kvm" && strings.Contains(ps[0].Message, "nested PVM")
}
