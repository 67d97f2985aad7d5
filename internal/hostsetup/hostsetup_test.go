package hostsetup

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

func TestNotRootNamesTheCommand(t *testing.T) {
	got := notRoot([]string{"qemu-system-x86", "shellcheck"}, nil).Error()
	want := "missing Debian packages: qemu-system-x86 shellcheck; run: sudo apt-get update && sudo apt-get install -y --no-install-recommends qemu-system-x86 shellcheck"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := notRoot(nil, nil).Error(); got != "apt has no package lists (the VM firmware and images are built from .deb files); run: sudo apt-get update" {
		t.Fatalf("no lists: %s", got)
	}
	got = notRoot([]string{"qemu-system-arm"}, []string{"arm64"}).Error()
	want = "missing Debian architectures: arm64 (the firmware and images of emulated guests); missing Debian packages: qemu-system-arm; run: sudo dpkg --add-architecture arm64 && sudo apt-get update && sudo apt-get install -y --no-install-recommends qemu-system-arm"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestEmulated(t *testing.T) {
	pkgs, arch := Emulated()
	if runtime.GOARCH == "amd64" && (arch != "arm64" || pkgs[0] != "qemu-system-arm") {
		t.Fatalf("amd64 host: %v %s", pkgs, arch)
	}
	if runtime.GOARCH == "arm64" && (arch != "amd64" || pkgs[0] != "qemu-system-x86") {
		t.Fatalf("arm64 host: %v %s", pkgs, arch)
	}
}

func TestMissing(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("no dpkg-query on this host: Missing asks dpkg")
	}
	if got := Missing([]string{"iii-no-such-package"}); len(got) != 1 {
		t.Fatalf("an unknown package counts as installed: %v", got)
	}
}

func TestAccelerator(t *testing.T) {
	t.Setenv("III_KVM_DEVICE", filepath.Join(t.TempDir(), "kvm"))
	if a, why := Accelerator(); a != "tcg" || why == "" {
		t.Fatalf("without a KVM device: %s (%s)", a, why)
	}
	t.Setenv("III_KVM_DEVICE", t.TempDir())
	if a, _ := Accelerator(); a != "auto" {
		t.Fatalf("with a KVM device: %s", a)
	}
}
