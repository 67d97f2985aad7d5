//go:build unix

package configworker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Entries may hold secrets: they are written 0600 in a 0700 directory, and a directory and
// entries an older version left open to other users are closed at start.
func TestEntryFilesArePrivate(t *testing.T) {
	mode := func(p string) os.FileMode {
		t.Helper()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	dir := filepath.Join(t.TempDir(), "config")
	w := mustNew(t, dir, nil)
	if _, err := w.register(context.Background(), callerNone, json.RawMessage(`{"id":"k","schema":null,"initial_value":{"key":"literal-secret"}}`)); err != nil {
		t.Fatal(err)
	}
	if m := mode(dir); m != 0o700 {
		t.Errorf("directory %v, want 0700", m)
	}
	if m := mode(filepath.Join(dir, "k.json")); m != 0o600 {
		t.Errorf("entry %v, want 0600", m)
	}

	old := filepath.Join(t.TempDir(), "config")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.json", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(old, f), []byte(`{"id":"a","value":1}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(old, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(old, 0o755); err != nil {
		t.Fatal(err)
	}
	mustNew(t, old, nil)
	if m := mode(old); m != 0o700 {
		t.Errorf("existing directory %v after start, want 0700", m)
	}
	for _, f := range []string{"a.json", "b.yaml"} {
		if m := mode(filepath.Join(old, f)); m != 0o600 {
			t.Errorf("existing %s %v after start, want 0600", f, m)
		}
	}
}
