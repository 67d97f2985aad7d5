package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/updater/internal/treetest"
)

// TestUpdateRefusesABinaryThatDoesNotRun: a release whose iii is empty or prints
// another version fails BINARY_CHECK_FAILED and leaves the installed iii as it was.
func TestUpdateRefusesABinaryThatDoesNotRun(t *testing.T) {
	for _, data := range []string{"", "#!/bin/sh\necho 0.25.9\n"} {
		home := setup(t)
		root := filepath.Join(home, "broken")
		treetest.Write(t, root, "0.26.0", true, treetest.Binary{Name: "iii", Target: triple, Data: []byte(data)})
		t.Setenv("III_RELEASE_URL", "file://"+root)
		bin := filepath.Join(home, ".local", "bin")
		old := []byte("#!/bin/sh\necho 0.25.0\n")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "iii"), old, 0o755); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), "0.25.0", []string{"self"}, &out, &errb, os.Getenv)
		if code != 1 || !strings.Contains(errb.String(), "error[BINARY_CHECK_FAILED]") || !strings.Contains(errb.String(), filepath.Join(bin, "iii")+" was left untouched") {
			t.Errorf("%q: exit %d, stderr:\n%s", data, code, errb.String())
		}
		if b, _ := os.ReadFile(filepath.Join(bin, "iii")); !bytes.Equal(b, old) {
			t.Errorf("%q: installed iii is now %q", data, b)
		}
		if entries, _ := os.ReadDir(bin); len(entries) != 1 {
			t.Errorf("%q: %s holds %v", data, bin, entries)
		}
	}
}

// TestUpdateRemovesLeftoverTemp: a .iii.new-* left by an interrupted update is removed at the
// next start, also when iii is already up to date.
func TestUpdateRemovesLeftoverTemp(t *testing.T) {
	home := setup(t)
	bin := filepath.Join(home, ".local", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bin, "iii"), []byte("#!/bin/sh\necho 0.26.0\n"), 0o755)
	os.WriteFile(filepath.Join(bin, ".iii.new-670185483"), []byte("partial"), 0o755)
	var out, errb bytes.Buffer
	if code := run(context.Background(), "0.26.0", []string{"self"}, &out, &errb, os.Getenv); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "removed .iii.new-670185483, left in "+bin+" by an interrupted update") {
		t.Errorf("stderr:\n%s", errb.String())
	}
	if _, err := os.Stat(filepath.Join(bin, ".iii.new-670185483")); !os.IsNotExist(err) {
		t.Errorf("leftover still there: %v", err)
	}
}
