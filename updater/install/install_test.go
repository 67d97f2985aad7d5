package install

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/iii-go/iii/updater/errcode"
	"github.com/iii-go/iii/updater/internal/treetest"
)

func TestExtractTarGzAndZip(t *testing.T) {
	got, err := Extract(treetest.TarGz(t, "iii", []byte("bin")), "iii-x.tar.gz", "iii")
	if err != nil || string(got) != "bin" {
		t.Errorf("tar.gz: %q, %v", got, err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("iii-dir/iii.exe")
	w.Write([]byte("exe"))
	zw.Close()
	got, err = Extract(buf.Bytes(), "iii-x.zip", "iii.exe")
	if err != nil || string(got) != "exe" {
		t.Errorf("zip: %q, %v", got, err)
	}
	if _, err := Extract(treetest.TarGz(t, "other", nil), "a.tar.gz", "iii"); errcode.CodeOf(err) != errcode.BadArchive {
		t.Errorf("missing entry: %v", err)
	}
	if _, err := Extract([]byte("not gzip"), "a.tar.gz", "iii"); errcode.CodeOf(err) != errcode.BadArchive {
		t.Errorf("garbage: %v", err)
	}
}

func TestWriteReplacesAtomicallyWithMode0755(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bin")
	dest := filepath.Join(dir, "iii")
	for _, content := range []string{"one", "two"} {
		if err := Write(dest, []byte(content), nil); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(dest)
		fi, _ := os.Stat(dest)
		if string(b) != content || fi.Mode().Perm() != 0o755 {
			t.Errorf("after writing %q: content %q mode %v", content, b, fi.Mode())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestWriteFailureKeepsOldBinary(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("skipped: root may write into a read-only directory (TestWriteFailureLeavesNoTemp covers root)")
	}
	dir := t.TempDir()
	dest := filepath.Join(dir, "iii")
	if err := os.WriteFile(dest, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if err := Write(dest, []byte("new"), nil); errcode.CodeOf(err) != errcode.InstallFailed {
		t.Errorf("Write into read-only dir: %v", err)
	}
	if b, _ := os.ReadFile(dest); string(b) != "old" {
		t.Errorf("old binary changed: %q", b)
	}
}

func TestWriteFailureLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "iii")
	if err := os.MkdirAll(filepath.Join(dest, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(dest, []byte("new"), nil); errcode.CodeOf(err) != errcode.InstallFailed {
		t.Errorf("Write over a non-empty directory: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "iii" {
		t.Errorf("directory now holds %v", entries)
	}
}

func TestDir(t *testing.T) {
	t.Setenv("HOME", "/h")
	if d, _ := Dir(""); d != "/h/.local/bin" {
		t.Errorf("default Dir = %q", d)
	}
	if d, _ := Dir("/opt/bin"); d != "/opt/bin" {
		t.Errorf("BIN_DIR Dir = %q", d)
	}
}
