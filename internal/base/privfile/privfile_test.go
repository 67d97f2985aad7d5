package privfile

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestWriteMakesPrivateFileInPrivateDir(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes on Windows; the home directory's ACL protects the files")
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	// A loose directory is tightened, a link at the path is replaced and not written through.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	_ = os.WriteFile(target, []byte("keep"), 0o644)
	_ = os.Remove(path)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("wrote through the link: %q", b)
	}
	st, _ := os.Lstat(path)
	dst, _ := os.Stat(dir)
	if !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
		t.Fatalf("file %v, dir %v; want a regular 0600 file in a 0700 dir", st.Mode(), dst.Mode())
	}
	if err := Check(path, false); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("left temporary files: %v", ents)
	}
	_ = os.Chmod(path, 0o640)
	if err := Check(path, false); err == nil {
		t.Fatal("Check accepted a file the group can read")
	}
	if err := EnsureDir(path); err == nil {
		t.Fatal("EnsureDir accepted a file")
	}
}
