package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// finishRAM punches the pages of zeros a saved machine wrote, keeps its other pages, and leaves
// the holes qemu never wrote as they are.
func TestFinishRAMPunchesZeroPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ram.img")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	const page, size = 4096, 8 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, page)
	// Written pages: data at 1 MiB and at the last page, zeros in between over 2 MiB.
	for _, w := range []struct {
		off int64
		b   []byte
	}{{1 << 20, data}, {1<<20 + page, make([]byte, 2<<20)}, {size - page, data}} {
		if _, err := f.WriteAt(w.b, w.off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if err := finishRAM(path, true); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	copy(want[1<<20:], data)
	copy(want[size-page:], data)
	if !bytes.Equal(got, want) {
		t.Fatal("finishRAM changed the file's contents")
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Sys().(*syscall.Stat_t).Blocks * 512; used > 64<<10 {
		t.Fatalf("%d bytes still allocated for two pages of data", used)
	}
}
