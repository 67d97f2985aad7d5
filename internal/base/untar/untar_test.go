package untar

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

type entry struct {
	name string
	typ  byte
	body string
	link string
	mode int64
}

func archive(t *testing.T, es ...entry) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(buf.Bytes())
}

// TestNothingLandsOutside: no name, symbolic link or hard link of an archive writes outside the
// directory, in either mode, links kept or not; Strict names the entry.
func TestNothingLandsOutside(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("safe"), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(t.TempDir(), victim)
	if err != nil {
		t.Fatal(err)
	}
	hostile := [][]entry{
		{{name: "../victim", typ: tar.TypeReg, body: "pwned"}},
		{{name: filepath.ToSlash(rel), typ: tar.TypeReg, body: "pwned"}},
		{{name: "a/../../victim", typ: tar.TypeReg, body: "pwned"}},
		{{name: victim, typ: tar.TypeReg, body: "pwned"}},
		{{name: "esc", typ: tar.TypeSymlink, link: outside}, {name: "esc/victim", typ: tar.TypeReg, body: "pwned"}},
		{{name: "esc", typ: tar.TypeSymlink, link: victim}, {name: "esc", typ: tar.TypeReg, body: "pwned"}},
		{{name: "d", typ: tar.TypeSymlink, link: "../" + filepath.Base(outside)}, {name: "d/victim", typ: tar.TypeReg, body: "pwned"}},
		{{name: "hl", typ: tar.TypeLink, link: "../victim"}},
		{{name: "hl", typ: tar.TypeLink, link: victim}, {name: "hl", typ: tar.TypeReg, body: "pwned"}},
	}
	for _, o := range []Options{{Links: true, Modes: true, Owners: true}, {Strict: true}, {}} {
		for _, es := range hostile {
			_, _ = Extract(archive(t, es...), t.TempDir(), o)
			if b, _ := os.ReadFile(victim); string(b) != "safe" {
				t.Fatalf("%+v: archive %v wrote outside the directory: %q", o, es, b)
			}
		}
	}
	if _, err := Extract(archive(t, entry{name: "../x", typ: tar.TypeReg}), t.TempDir(), Options{Strict: true}); err == nil || !strings.Contains(err.Error(), `unsafe entry "../x"`) {
		t.Errorf("strict: %v", err)
	}
	if _, err := Extract(archive(t, entry{name: "/etc/x", typ: tar.TypeReg}), t.TempDir(), Options{Strict: true}); err == nil {
		t.Error("strict: an absolute name was accepted")
	}
}

// TestASymlinkAlreadyInTheDirectoryIsNotFollowed: a link planted in the directory before the
// extraction does not carry an entry outside either.
func TestASymlinkAlreadyInTheDirectoryIsNotFollowed(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("creating symbolic links needs a privilege on Windows")
	}
	outside, dir := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "planted")); err != nil {
		t.Fatal(err)
	}
	_, err := Extract(archive(t, entry{name: "planted/x", typ: tar.TypeReg, body: "pwned"}), dir, Options{})
	if _, serr := os.Stat(filepath.Join(outside, "x")); serr == nil {
		t.Fatalf("wrote through the planted link (err %v)", err)
	}
}

func TestKeepsWhatOptionsSay(t *testing.T) {
	es := []entry{
		{name: "bin/", typ: tar.TypeDir, mode: 0o555},
		{name: "bin/tool", typ: tar.TypeReg, body: "#!/bin/sh\n", mode: 0o4711},
		{name: "/etc/conf", typ: tar.TypeReg, body: "c", mode: 0o200},
		{name: "link", typ: tar.TypeSymlink, link: "bin/tool"},
		{name: "hard", typ: tar.TypeLink, link: "etc/conf"},
	}
	dir := t.TempDir()
	n, err := Extract(archive(t, es...), dir, Options{})
	if err != nil || n != 2 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if runtime.GOOS != "windows" {
		if fi, _ := os.Stat(filepath.Join(dir, "etc", "conf")); fi.Mode() != 0o600 {
			t.Errorf("permission bits plus owner read: %v", fi.Mode())
		}
		if fi, _ := os.Stat(filepath.Join(dir, "bin")); fi.Mode().Perm() != 0o755 {
			t.Errorf("directory: %v", fi.Mode())
		}
	}
	for _, l := range []string{"link", "hard"} {
		if _, err := os.Lstat(filepath.Join(dir, l)); err == nil {
			t.Errorf("%s kept without Links", l)
		}
	}
	if runtime.GOOS == "windows" {
		return
	}
	dir = t.TempDir()
	if _, err := Extract(archive(t, es...), dir, Options{Links: true, Modes: true}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "bin", "tool")); fi.Mode() != 0o711|os.ModeSetuid {
		t.Errorf("full mode: %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(dir, "bin")); fi.Mode().Perm() != 0o555 {
		t.Errorf("directory mode: %v", fi.Mode())
	}
	if l, _ := os.Readlink(filepath.Join(dir, "link")); l != "bin/tool" {
		t.Errorf("symlink: %q", l)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "hard")); string(b) != "c" {
		t.Errorf("hard link: %q", b)
	}
	_ = os.Chmod(filepath.Join(dir, "bin"), 0o755) // so the test can remove it
}

func TestCaps(t *testing.T) {
	var tl *TooLargeError
	_, err := Extract(archive(t, entry{name: "a", typ: tar.TypeReg, body: "1"}, entry{name: "b", typ: tar.TypeReg, body: "2"}), t.TempDir(), Options{MaxFiles: 1})
	if !errors.As(err, &tl) || tl.What != "more than 1 files" {
		t.Errorf("files: %v", err)
	}
	_, err = Extract(archive(t, entry{name: "a", typ: tar.TypeReg, body: strings.Repeat("x", 3<<20)}), t.TempDir(), Options{MaxBytes: 2 << 20})
	if !errors.As(err, &tl) || tl.What != "more than 2 MiB" {
		t.Errorf("bytes: %v", err)
	}
	if n, err := Extract(archive(t, entry{name: "a", typ: tar.TypeReg, body: "1"}), t.TempDir(), Options{MaxFiles: 1, MaxBytes: 1}); n != 1 || err != nil {
		t.Errorf("at the caps: %d %v", n, err)
	}
}
