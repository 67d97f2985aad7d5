package shadow

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func exe(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFind(t *testing.T) {
	root := t.TempDir()
	local := filepath.Join(root, "home", ".local", "bin")
	brew := filepath.Join(root, "opt", "homebrew", "bin")
	other := filepath.Join(root, "usr", "bin")
	exe(t, filepath.Join(local, "iii"))
	exe(t, filepath.Join(brew, "iii"))
	exe(t, filepath.Join(other, "iii"))
	installed := filepath.Join(local, "iii")

	t.Setenv("PATH", local+string(os.PathListSeparator)+brew)
	if s, ok := Find("iii", installed); ok {
		t.Errorf("installed copy first on PATH reported as shadowed by %+v", s)
	}
	t.Setenv("PATH", brew+string(os.PathListSeparator)+local)
	if s, ok := Find("iii", installed); !ok || s.Path != filepath.Join(brew, "iii") || !s.Homebrew {
		t.Errorf("Homebrew first: %+v %v", s, ok)
	}
	t.Setenv("PATH", other+string(os.PathListSeparator)+local)
	if s, ok := Find("iii", installed); !ok || s.Path != filepath.Join(other, "iii") || s.Homebrew {
		t.Errorf("other copy first: %+v %v", s, ok)
	}
	link := filepath.Join(root, "links")
	os.MkdirAll(link, 0o755)
	if err := os.Symlink(installed, filepath.Join(link, "iii")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", link)
	if s, ok := Find("iii", installed); ok {
		t.Errorf("a symlink to the installed copy reported as shadow %+v", s)
	}
}

func TestIsHomebrew(t *testing.T) {
	for p, want := range map[string]bool{
		"/opt/homebrew/bin/iii":                true,
		"/home/linuxbrew/.linuxbrew/bin/iii":   true,
		"/usr/local/Cellar/iii/0.25.0/bin/iii": true,
		"/usr/local/bin/iii":                   false,
		"/home/u/.local/bin/iii":               false,
	} {
		if got := IsHomebrew(p); got != want {
			t.Errorf("IsHomebrew(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestWarningFixAndVersion(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "opt", "homebrew", "bin", "iii")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho iii 0.25.0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	v := Version(context.Background(), bin)
	if v != "0.25.0" {
		t.Fatalf("Version = %q", v)
	}
	if Version(context.Background(), filepath.Join(root, "missing")) != "" {
		t.Error("Version of a missing binary is not empty")
	}
	s := Shadow{Path: bin, Homebrew: true}
	if got, want := s.Warning("/h/.local/bin/iii", v), "your shell runs "+bin+" (0.25.0), not /h/.local/bin/iii, which iii update installs."; got != want {
		t.Errorf("Warning = %q, want %q", got, want)
	}
	if got := s.Fix("/h/.local/bin"); !strings.Contains(got, "brew upgrade iii") {
		t.Errorf("Homebrew Fix = %q", got)
	}
	s.Homebrew = false
	if got := s.Fix("/h/.local/bin"); !strings.Contains(got, "rm "+bin) || !strings.Contains(got, `export PATH="/h/.local/bin:$PATH"`) {
		t.Errorf("Fix = %q", got)
	}
}
