package supervisor

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLogTail: the last n lines without their stream tags, and "" for a file that cannot be read.
func TestLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "engine.log")
	if err := os.WriteFile(p, []byte("stdout a\nstderr b\nstdout c\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := LogTail(p, 2); got != "c\nd" {
		t.Errorf("tail 2 = %q", got)
	}
	if got := LogTail(p, 10); got != "a\nb\nc\nd" {
		t.Errorf("tail 10 = %q", got)
	}
	if got := LogTail(filepath.Join(t.TempDir(), "none"), 2); got != "" {
		t.Errorf("missing file: %q", got)
	}
}
