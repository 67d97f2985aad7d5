package leftover

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFindListsOnlyWhatExistsAndDeletesNothing(t *testing.T) {
	home := t.TempDir()
	bin := filepath.Join(home, ".local", "bin")
	mk := func(rel string, dir bool) {
		p := filepath.Join(home, rel)
		if dir {
			os.MkdirAll(p, 0o755)
			return
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x"), 0o755)
	}
	mk(".local/bin/iii", false)
	mk(".local/bin/iii-init", false)
	mk(".iii/managed/w1", true)
	mk(".iii/cache/bundles", true)
	mk(".iii/cache/images", true)
	mk(".iii/lib/iii-init", false)
	mk(".iii/lib/libkrunfw.so", false)
	var got []string
	for _, it := range Find(home, bin, "") {
		rel, _ := filepath.Rel(home, it.Path)
		if it.Dir {
			rel += "/"
		}
		got = append(got, rel)
	}
	want := []string{".local/bin/iii-init", ".iii/managed/", ".iii/cache/bundles/", ".iii/lib/iii-init"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Find (-want +got):\n%s", d)
	}
	if _, err := os.Stat(filepath.Join(home, ".iii", "managed", "w1")); err != nil {
		t.Errorf("Find touched the disk: %v", err)
	}
	empty := t.TempDir()
	if items := Find(empty, filepath.Join(empty, ".local", "bin"), ""); len(items) != 0 {
		t.Errorf("empty home: %v", items)
	}
}

func TestRemoveCommandsAndKeepNote(t *testing.T) {
	items := []Item{{Path: "/h/.local/bin/iii-worker"}, {Path: "/h/.iii/managed", Dir: true}, {Path: "/h/.iii/lib/iii-init"}}
	want := []string{"rm /h/.local/bin/iii-worker /h/.iii/lib/iii-init", "rm -r /h/.iii/managed"}
	if d := cmp.Diff(want, RemoveCommands(items)); d != "" {
		t.Errorf("RemoveCommands (-want +got):\n%s", d)
	}
	if got := items[1].RemoveCommand(); got != "rm -r /h/.iii/managed" {
		t.Errorf("RemoveCommand = %q", got)
	}
	if got := items[1].Display(); got != "/h/.iii/managed/" {
		t.Errorf("Display = %q", got)
	}
	if got, want := KeepNote("/h"), "Keep the rest of /h/.iii/lib/ and /h/.iii/cache/: sandbox-libkrun still uses them."; got != want {
		t.Errorf("KeepNote = %q, want %q", got, want)
	}
}
