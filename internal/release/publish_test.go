package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPublishFileWritesSidecarAndIndexEntry(t *testing.T) {
	src := filepath.Join(t.TempDir(), "install.sh")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := PublishFile(dir, "0.26.0", src)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "install.sh" || a.Product != "install.sh" || a.Target != "" || a.Size != 10 || len(a.SHA256) != 64 {
		t.Errorf("asset %+v", a)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "install.sh")); string(b) != "#!/bin/sh\n" {
		t.Errorf("copy holds %q", b)
	}
	side, _ := os.ReadFile(filepath.Join(dir, "install.sh.sha256"))
	if string(side) != ChecksumLine(a.SHA256, "install.sh") {
		t.Errorf("sidecar %q", side)
	}
	if _, err := WriteIndex(dir, "0.26.0", []Asset{a}); err != nil {
		t.Fatal(err)
	}
	sums, _ := os.ReadFile(filepath.Join(dir, "checksums.txt"))
	if !strings.Contains(string(sums), "  install.sh\n") {
		t.Errorf("checksums.txt: %q", sums)
	}
}
