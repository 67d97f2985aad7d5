package hostreq

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/platform"
)

func envOf(m map[string]string) Env {
	return Env{Getenv: func(k string) string { return m[k] }, Home: "/nonexistent-home"}
}

func codes(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Code)
	}
	return out
}

func TestMissingPiecesEachHaveTheirCode(t *testing.T) {
	dir := t.TempDir()
	e := envOf(map[string]string{
		"III_KVM_DEVICE": filepath.Join(dir, "no-kvm"),
		"III_LIBCAPNG":   filepath.Join(dir, "no-libcap-ng.so.0"),
		"III_LIB_DIR":    filepath.Join(dir, "lib"),
	})
	ps := Run(e, platform.Parse("x86_64-unknown-linux-gnu"), "")
	if got := strings.Join(codes(ps), " "); got != "KVM_ACCESS LIBCAPNG_MISSING FIRMWARE_MISSING" {
		t.Fatalf("codes = %s", got)
	}
	for i, want := range []string{"does not exist. Load the module", "needed by virtiofsd); install it with `apt-get install libcap-ng0`", "not found; the sandbox-libkrun package installs it at start"} {
		if !strings.Contains(ps[i].String(), want) {
			t.Errorf("%s: %q lacks %q", ps[i].Code, ps[i].Message, want)
		}
	}
	if ps[0].Path != filepath.Join(dir, "no-kvm") || ps[2].Path != filepath.Join(dir, "lib", KernelFile) {
		t.Errorf("paths: %q %q", ps[0].Path, ps[2].Path)
	}
}

func TestKVMOnlyUnderKVM(t *testing.T) {
	e := envOf(map[string]string{"III_KVM_DEVICE": filepath.Join(t.TempDir(), "no-kvm")})
	for _, accel := range []string{"tcg", "auto"} {
		for _, c := range codes(Run(e, platform.Parse("x86_64-unknown-linux-gnu"), accel)) {
			if c == "KVM_ACCESS" {
				t.Errorf("accelerator %s: KVM_ACCESS", accel)
			}
		}
	}
	ps := Run(e, platform.Parse("x86_64-unknown-linux-gnu"), AccelKVM)
	if len(ps) == 0 || ps[0].Code != "KVM_ACCESS" || !strings.HasSuffix(ps[0].String(), TCGHint) {
		t.Fatalf("kvm: %v", ps)
	}
}

func TestPresentPieces(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"kvm", "libcap-ng.so.0", KernelFile, InitrdFile} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := envOf(map[string]string{"III_KVM_DEVICE": filepath.Join(dir, "kvm"), "III_LIBCAPNG": filepath.Join(dir, "libcap-ng.so.0"), "III_LIB_DIR": dir})
	if ps := Run(e, platform.Parse("x86_64-unknown-linux-gnu"), ""); len(ps) != 0 {
		t.Fatalf("problems on a complete host: %v", ps)
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
	if p := KVM(dev); p == nil || p.Code != errcode.KVMAccess || !strings.Contains(p.Fix, "usermod -aG kvm") || !strings.Contains(p.String(), "permission. Add your user") {
		t.Fatalf("got %v", p)
	}
}

func TestUnsupportedPlatformOnly(t *testing.T) {
	for _, triple := range []string{"x86_64-unknown-linux-musl", "x86_64-apple-darwin", "x86_64-pc-windows-msvc"} {
		ps := Run(envOf(nil), platform.Parse(triple), "")
		if len(ps) != 1 || ps[0].Code != errcode.UnsupportedPlatform || !strings.Contains(ps[0].String(), "no build for "+triple+". It ships: ") {
			t.Errorf("%s: %v", triple, ps)
		}
	}
	for _, triple := range Targets {
		if p := Platform(platform.Parse(triple)); p != nil {
			t.Errorf("%s: %v", triple, p)
		}
	}
}

func TestFirmwareDirDefaultsUnderHome(t *testing.T) {
	if got := (Env{Getenv: func(string) string { return "" }, Home: "/h"}).FirmwareDir(); got != "/h/.iii/lib" {
		t.Errorf("FirmwareDir = %s", got)
	}
	if got := (Env{Getenv: func(string) string { return "" }}).KVMDevice(); got != "/dev/kvm" {
		t.Errorf("KVMDevice = %s", got)
	}
}

// A host without mkfs.ext4 (III_MKFS naming a path that is not there) fails MKFS_MISSING, with
// the packages to install and the setting that runs VM workers without a state disk.
func TestMkfsMissing(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-mkfs.ext4")
	p := Mkfs(envOf(map[string]string{"III_MKFS": missing}))
	if p == nil || p.Code != errcode.MkfsMissing || p.Path != missing {
		t.Fatalf("problem %+v", p)
	}
	for _, want := range []string{"mkfs.ext4 not found", "e2fsprogs", "worker_disk_mb: 0"} {
		if !strings.Contains(p.String(), want) {
			t.Errorf("%q lacks %q", p.String(), want)
		}
	}
	present := filepath.Join(dir, "mkfs.ext4")
	if err := os.WriteFile(present, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p := Mkfs(envOf(map[string]string{"III_MKFS": present})); p != nil {
		t.Fatalf("present mkfs: %+v", p)
	}
	if got := FindMkfs(envOf(map[string]string{"III_MKFS": present})); got != present {
		t.Fatalf("FindMkfs = %q", got)
	}
}

// The zero Env has no variables, whatever the process's own say: a main hands its environment
// down.
func TestZeroEnvHasNoVariables(t *testing.T) {
	t.Setenv("III_KVM_DEVICE", "/from-env")
	if got := (Env{}).KVMDevice(); got != "/dev/kvm" {
		t.Fatalf("KVMDevice() = %q, want /dev/kvm", got)
	}
}
