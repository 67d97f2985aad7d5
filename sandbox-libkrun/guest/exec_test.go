//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCapWriter(t *testing.T) {
	var fwd []byte
	w := &capWriter{max: 5, forward: func(b []byte) { fwd = append(fwd, b...) }}
	for _, s := range []string{"ab", "cdef", "gh"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if w.buf.String() != "abcde" || !w.truncated || string(fwd) != "abcde" {
		t.Fatalf("kept %q truncated=%v forwarded %q", w.buf.String(), w.truncated, fwd)
	}
}

func TestLookPathAndSpawnFailure(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := lookPath("tool", "/nonexistent:"+dir); err != nil || p != exe {
		t.Fatalf("lookPath tool = %q, %v", p, err)
	}
	for name, want := range map[string]int{"missing": 127, "plain": 126, plain: 126, dir + "/nope": 127, dir: 126} {
		_, err := lookPath(name, dir)
		if err == nil {
			t.Fatalf("lookPath(%q) succeeded", name)
		}
		if got := *spawnFailure(name, err).ExitCode; got != want {
			t.Errorf("%s: exit %d, want %d (%v)", name, got, want, err)
		}
	}
	if envGet([]string{"A=1", "PATH=/x", "PATH=/y"}, "PATH") != "/y" {
		t.Fatal("envGet does not take the last value")
	}
}
