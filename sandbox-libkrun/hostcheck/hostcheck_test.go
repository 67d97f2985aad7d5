package hostcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	ps := Run()
	for check, want := range map[string]string{
		"qemu":      "apt-get install qemu-system-x86",
		"virtiofsd": "apt-get install qemu-system-common",
		"kvm":       "does not exist",
		"libcap-ng": "apt-get install libcap-ng0",
		"firmware":  "go tool mage firmware",
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

func TestKVMPermission(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root opens any file; the permission case needs an unprivileged user")
	}
	dev := filepath.Join(t.TempDir(), "kvm")
	if err := os.WriteFile(dev, nil, 0o400); err != nil {
		t.Fatal(err)
	}
	p := checkKVM(dev)
	if p == nil || !strings.Contains(p.Message, "usermod -aG kvm") {
		t.Fatalf("got %v", p)
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
	if ps := Run(); len(ps) != 0 {
		t.Fatalf("problems on a complete host: %v", ps)
	}
}
