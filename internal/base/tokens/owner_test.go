package tokens

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestWriteLookupRemove(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	if _, err := LookupOwner("ws://127.0.0.1:9"); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("LookupOwner before WriteOwner: %v", err)
	}
	stale, _, err := WriteOwner("0.0.0.0:9")
	if err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(stale)
	path, remove, err := WriteOwner("127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	if path != stale {
		t.Fatalf("paths differ: %s, %s", stale, path)
	}
	if now, _ := os.ReadFile(path); string(now) == string(old) || len(now) != 65 {
		t.Fatalf("the stale credential was not replaced by a fresh token (%d bytes)", len(now))
	}
	if runtime.GOOS != "windows" {
		st, _ := os.Stat(path)
		dst, _ := os.Stat(filepath.Dir(path))
		if st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
			t.Fatalf("modes %v %v, want 0600 in 0700", st.Mode().Perm(), dst.Mode().Perm())
		}
	}
	got, err := LookupOwner("ws://localhost:9")
	if err != nil || got != path {
		t.Fatalf("LookupOwner = %q, %v", got, err)
	}
	if runtime.GOOS != "windows" {
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LookupOwner("ws://127.0.0.1:9"); err == nil || errors.Is(err, ErrNoOwner) {
			t.Fatalf("LookupOwner trusted a file others can read: %v", err)
		}
		_ = os.Chmod(path, 0o600)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remove left %s: %v", path, err)
	}
}

func TestRemoveKeepsAReplacement(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	_, remove, err := WriteOwner("127.0.0.1:10")
	if err != nil {
		t.Fatal(err)
	}
	path, _, err := WriteOwner("127.0.0.1:10")
	if err != nil {
		t.Fatal(err)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the first engine's remove deleted the second one's credential: %v", err)
	}
	if err := ClearOwner("127.0.0.1:10"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ClearOwner left %s", path)
	}
}
