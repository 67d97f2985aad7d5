//go:build linux

package qemu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The image of a directory is built once, beside it, reused while the directory stays, built
// again when another directory is renamed into its place (as the image cache replaces an
// entry), and found through a symbolic link to the directory.
func TestRootImageBuiltOnceAndRebuilt(t *testing.T) {
	mkfs := MkfsErofsPath()
	if _, err := exec.LookPath(mkfs); err != nil {
		t.Skip("mkfs.erofs (erofs-utils, installed by go tool mage setup) is missing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := t.TempDir()
	dir := filepath.Join(base, "img")
	mkRoot := func(dir, content string) {
		if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "etc", "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkRoot(dir, "one")
	img, err := rootImage(ctx, mkfs, dir)
	if err != nil || img != dir+rootImageSuffix {
		t.Fatalf("rootImage = %q, %v", img, err)
	}
	first, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := rootImage(ctx, mkfs, dir); err != nil || again != img {
		t.Fatalf("second call: %q %v", again, err)
	}
	if st, _ := os.Stat(img); !os.SameFile(first, st) {
		t.Fatal("the image was built again for an unchanged directory")
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if viaLink, err := rootImage(ctx, mkfs, link); err != nil || viaLink != img {
		t.Fatalf("through a link: %q %v, want %q", viaLink, err, img)
	}
	mkRoot(filepath.Join(base, "new"), "two")
	if err := os.Rename(dir, filepath.Join(base, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(base, "new"), dir); err != nil {
		t.Fatal(err)
	}
	if _, err := rootImage(ctx, mkfs, dir); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(img); os.SameFile(first, st) {
		t.Fatal("the image was not rebuilt for a replaced directory")
	}
	if left, _ := filepath.Glob(img + ".tmp-*"); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if _, err := rootImage(ctx, "/nonexistent/mkfs.erofs", filepath.Join(base, "old")); err == nil {
		t.Fatal("a failing mkfs gave an image")
	}
}
