package firmware

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// carried writes a firmware directory whose files hold kernel and initrd, as mage builds it.
func carried(t *testing.T, kernel, initrd string) Paths {
	t.Helper()
	p := At(t.TempDir())
	must(t, os.WriteFile(p.Kernel, []byte(kernel), 0o644))
	must(t, os.WriteFile(p.Initrd, []byte(initrd), 0o644))
	must(t, writeManifest(p, Manifest{KernelRelease: "6.1-test", Agent: proto.AgentVersion,
		SHA256: map[string]string{KernelFile: digest([]byte(kernel)), InitrdFile: digest([]byte(initrd))}}))
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return string(b)
}

func install(t *testing.T, src, dst Paths, version string, want Action) {
	t.Helper()
	got, err := Install(src, dst, version)
	if err != nil || got != want {
		t.Fatalf("Install(%s) = %q, %v; want %q", version, got, err, want)
	}
}

func TestInstallLifecycle(t *testing.T) {
	v1 := carried(t, "kernel-1", "initrd-1")
	dst := At(filepath.Join(t.TempDir(), "lib"))

	install(t, v1, dst, "0.3.1", Installed)
	if read(t, dst.Kernel) != "kernel-1" || read(t, dst.Initrd) != "initrd-1" {
		t.Fatal("files not copied")
	}
	m, err := ReadManifest(dst)
	must(t, err)
	if m.InstalledBy != "0.3.1" || m.SHA256[KernelFile] != digest([]byte("kernel-1")) {
		t.Fatalf("manifest %+v", m)
	}
	install(t, v1, dst, "0.3.1", Current)

	v2 := carried(t, "kernel-2", "initrd-2")
	install(t, v2, dst, "0.3.2", Replaced)
	if read(t, dst.Kernel) != "kernel-2" {
		t.Fatal("not replaced")
	}
	// An older adapter leaves the newer firmware alone.
	install(t, v1, dst, "0.3.1", Newer)
	if read(t, dst.Kernel) != "kernel-2" {
		t.Fatal("downgraded")
	}
	// A missing file is put back.
	must(t, os.Remove(dst.Initrd))
	install(t, v2, dst, "0.3.2", Replaced)
	if read(t, dst.Initrd) != "initrd-2" {
		t.Fatal("initrd not restored")
	}
	if left, _ := filepath.Glob(filepath.Join(dst.Dir, ".*.tmp-*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestInstallKeepsForeignFirmware(t *testing.T) {
	src := carried(t, "kernel-1", "initrd-1")
	dst := At(t.TempDir())
	must(t, os.WriteFile(dst.Kernel, []byte("operator's kernel"), 0o644))
	must(t, os.WriteFile(dst.Initrd, []byte("operator's initrd"), 0o644))
	install(t, src, dst, "0.3.1", Kept)
	if read(t, dst.Kernel) != "operator's kernel" {
		t.Fatal("foreign kernel overwritten")
	}
	if _, err := os.Stat(dst.Manifest); err == nil {
		t.Fatal("a manifest was written beside foreign files")
	}
}

func TestInstallRefusesCorruptBundle(t *testing.T) {
	src := carried(t, "kernel-1", "initrd-1")
	must(t, os.WriteFile(src.Kernel, []byte("kernel-X"), 0o644))
	dst := At(filepath.Join(t.TempDir(), "lib"))
	if _, err := Install(src, dst, "0.3.1"); err == nil {
		t.Fatal("a corrupt carried kernel was installed")
	}
	if present(dst.Kernel) || present(dst.Manifest) {
		t.Fatal("a file was left behind after a refused install")
	}
}
