package install

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/updater/errcode"
)

// TestSweepRemovesInterruptedWrites: .iii.new-* files of a dead process or of an older iii (no
// process id) are removed; a live writer's and other programs' files stay.
func TestSweepRemovesInterruptedWrites(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "iii")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("skipped: no `true` to get a dead process id: %v", err)
	}
	live := fmt.Sprintf(".iii.new-p%d-42", os.Getppid())
	for _, name := range []string{".iii.new-670185483", fmt.Sprintf(".iii.new-p%d-7", dead.Process.Pid), live, ".other.new-1", "iii"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed := Sweep(dest)
	if len(removed) != 2 {
		t.Errorf("removed %v, want the two stale files", removed)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := live + ",.other.new-1,iii"; strings.Join(left, ",") != want {
		t.Errorf("left %v, want %s", left, want)
	}
}

// TestWriteRefusesABinaryThatFailsItsCheck: an empty file, a file that is not a program, a
// program that prints another version, and one that exits non-zero never replace dest (#52).
func TestWriteRefusesABinaryThatFailsItsCheck(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "iii")
	if err := os.WriteFile(dest, []byte("#!/bin/sh\necho 0.25.0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(p string) error { return CheckVersion(context.Background(), p, "iii", "0.26.1") }
	for _, bad := range []string{"", "\x7fELF garbage", "#!/bin/sh\necho 0.26.0\n", "#!/bin/sh\necho 0.26.1; exit 3\n", "#!/bin/sh\necho v0.26.10\n"} {
		err := Write(dest, []byte(bad), check)
		if errcode.CodeOf(err) != errcode.BinaryCheckFailed {
			t.Errorf("%q: %v", bad, err)
		}
		if b, _ := os.ReadFile(dest); string(b) != "#!/bin/sh\necho 0.25.0\n" {
			t.Fatalf("%q replaced the installed binary", bad)
		}
	}
	for _, good := range []string{"#!/bin/sh\necho 0.26.1\n", "#!/bin/sh\necho iii v0.26.1\n"} {
		if err := Write(dest, []byte(good), check); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}
