package image

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layerTar(t *testing.T, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layoutOf(t *testing.T, ref string, layers ...[]byte) string {
	t.Helper()
	img := empty.Image
	for _, l := range layers {
		data := l
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{RefAnnotation: ref})); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/iiidev/python:latest": "index.docker.io_iiidev_python_latest",
		"iiidev/python":                  "index.docker.io_iiidev_python_latest",
		"ghcr.io/a/b:1.2":                "ghcr.io_a_b_1.2",
	} {
		if got, err := Slug(in); err != nil || got != want {
			t.Errorf("Slug(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Slug("UPPER/case"); err == nil {
		t.Error("invalid reference accepted")
	}
}

func TestImportLayout(t *testing.T) {
	ref := "docker.io/iiidev/test:1"
	base := layerTar(t, []entry{
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/sh", typ: tar.TypeReg, body: "#!", mode: 0o755},
		{name: "etc/gone", typ: tar.TypeReg, body: "x"},
		{name: "usr/bin/tool", typ: tar.TypeReg, body: "tool", mode: 0o4755},
		{name: "usr/bin/alias", typ: tar.TypeSymlink, link: "tool"},
		{name: "usr/bin/hard", typ: tar.TypeLink, link: "usr/bin/tool"},
	})
	top := layerTar(t, []entry{{name: "etc/.wh.gone", typ: tar.TypeReg}, {name: "etc/new", typ: tar.TypeReg, body: "new"}})
	c := NewCache(t.TempDir())
	if _, ok := c.RootFS(ref); ok {
		t.Fatal("empty cache reports the image present")
	}
	root, err := c.ImportLayout(layoutOf(t, ref, base, top), ref)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := c.RootFS(ref); !ok || p != root || !strings.HasPrefix(root, filepath.Join(c.Dir, "index.docker.io_iiidev_test_1")) {
		t.Fatalf("RootFS = %q, %v; import gave %q", p, ok, root)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "gone")); !os.IsNotExist(err) {
		t.Fatalf("whiteout not applied: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "usr", "bin", "alias")); string(b) != "tool" {
		t.Fatalf("symlink: %q", b)
	}
	if fi, err := os.Stat(filepath.Join(root, "usr", "bin", "tool")); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("setuid bit lost: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "usr", "bin", "hard")); string(b) != "tool" {
		t.Fatalf("hard link: %q", b)
	}
	if cfg, err := c.Config(ref); err != nil || cfg.Env != nil {
		t.Fatalf("config: %+v %v", cfg, err)
	}
	// A second import replaces the first.
	if _, err := c.ImportLayout(layoutOf(t, ref, layerTar(t, []entry{{name: "bin/sh", typ: tar.TypeReg, body: "v2"}})), ref); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "bin", "sh")); string(b) != "v2" {
		t.Fatalf("re-import: %q", b)
	}
	// The replaced rootfs stays (a running VM may serve it) until it is an hour old.
	olds, _ := filepath.Glob(root + ".old-*")
	if len(olds) != 1 {
		t.Fatalf("set-aside rootfs: %v", olds)
	}
	removeStale(filepath.Dir(root), 0)
	if olds, _ := filepath.Glob(root + ".old-*"); len(olds) != 0 {
		t.Fatalf("stale rootfs kept: %v", olds)
	}
}

func TestNoBin(t *testing.T) {
	c := NewCache(t.TempDir())
	_, err := c.ImportLayout(layoutOf(t, "x/y:1", layerTar(t, []entry{{name: "etc/a", typ: tar.TypeReg}})), "x/y:1")
	if err != ErrNoBin {
		t.Fatalf("got %v, want ErrNoBin", err)
	}
}

func TestExtractStaysInside(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("safe"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, es := range [][]entry{
		{{name: "../victim", typ: tar.TypeReg, body: "pwned"}},
		{{name: "esc", typ: tar.TypeSymlink, link: outside}, {name: "esc/victim", typ: tar.TypeReg, body: "pwned"}},
		{{name: "hl", typ: tar.TypeLink, link: "../victim"}},
	} {
		_ = extract(bytes.NewReader(layerTar(t, es)), t.TempDir())
		if b, _ := os.ReadFile(victim); string(b) != "safe" {
			t.Fatalf("archive %v wrote outside the root: %q", es, b)
		}
	}
}
