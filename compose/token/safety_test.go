package token

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckReplacesAGroupOrOtherReadableToken: a token that was mode 0644 (committed to git,
// say) is replaced, not tightened and kept, with a warning that says why.
func TestCheckReplacesAGroupOrOtherReadableToken(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		dir := t.TempDir()
		p := Path(dir)
		known := []byte("publicly-known-token-from-git\n")
		if err := os.WriteFile(p, known, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		got, created, warning, err := Check(dir)
		if err != nil || got != p || !created {
			t.Fatalf("mode %04o: Check = %q, %v, %v", mode, got, created, err)
		}
		if !strings.Contains(warning, p) || !strings.Contains(warning, "group or others") || !strings.Contains(warning, "replaced it with a new token") || strings.Contains(warning, "publicly-known") {
			t.Errorf("mode %04o: warning %q", mode, warning)
		}
		b, _ := os.ReadFile(p)
		st, _ := os.Lstat(p)
		if bytes.Equal(b, known) || len(bytes.TrimSpace(b)) != 64 || st.Mode().Perm() != 0o600 {
			t.Errorf("mode %04o: token now %q, mode %04o", mode, b, st.Mode().Perm())
		}
	}
}

// TestCheckNeverFollowsASymlink: a token that is a symlink is replaced by a regular file; the
// link's target is neither read as the token nor chmodded.
func TestCheckNeverFollowsASymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim2")
	if err := os.WriteFile(victim, []byte("not a token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(victim, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{victim, filepath.Join(dir, "missing")} {
		p := Path(dir)
		os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		_, created, warning, err := Check(dir)
		if err != nil || !created || !strings.Contains(warning, "was a symlink (to "+target+")") {
			t.Fatalf("link to %s: created %v, warning %q, %v", target, created, warning, err)
		}
		st, _ := os.Lstat(p)
		if !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
			t.Fatalf("link to %s: token is now %v", target, st.Mode())
		}
	}
	st, _ := os.Stat(victim)
	b, _ := os.ReadFile(victim)
	if st.Mode().Perm() != 0o644 || string(b) != "not a token\n" {
		t.Errorf("the link's target was touched: mode %04o, %q", st.Mode().Perm(), b)
	}
}

// TestCheckKeepsAGoodToken: an owner-only token is kept without a word; a missing or empty one
// is written without a warning; a directory in its place is replaced with one.
func TestCheckKeepsAGoodToken(t *testing.T) {
	dir := t.TempDir()
	p, created, warning, err := Check(dir)
	if err != nil || !created || warning != "" {
		t.Fatalf("fresh: %v %q %v", created, warning, err)
	}
	first, _ := os.ReadFile(p)
	if _, created, warning, _ := Check(dir); created || warning != "" {
		t.Fatalf("second Check: created %v, warning %q", created, warning)
	}
	if again, _ := os.ReadFile(p); !bytes.Equal(first, again) {
		t.Fatal("a good token was changed")
	}
	os.WriteFile(p, nil, 0o600)
	if _, created, warning, _ := Check(dir); !created || warning != "" {
		t.Fatalf("empty: created %v, warning %q", created, warning)
	}
}

// TestMarkExposedDoesNotWriteThroughALink: the exposure record is written by rename, so a
// dangling link in its place is replaced, and its target never created.
func TestMarkExposedDoesNotWriteThroughALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "created-through-the-link")
	if err := os.Symlink(target, filepath.Join(dir, metaName)); err != nil {
		t.Fatal(err)
	}
	if err := MarkExposed(dir, "api", "0.3.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the record was written through the link: %v", err)
	}
	if st, _ := os.Lstat(filepath.Join(dir, metaName)); !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Errorf("record is %v", st.Mode())
	}
}
