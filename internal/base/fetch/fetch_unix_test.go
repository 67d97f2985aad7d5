//go:build unix

package fetch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestNotRegular: a device, a link to one and a fifo are refused, and the fifo is refused without
// waiting for a writer.
func TestNotRegular(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/dev/zero", link, fifo} {
		if _, err := Open(context.Background(), "file://"+p); !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: %v; want ErrNotRegular", p, err)
		}
	}
}
