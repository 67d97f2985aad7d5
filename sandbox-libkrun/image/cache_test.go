package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

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
	// The slugs 0.25 gave (its rootfs_slug_for_image: sanitised canonical ref + FNV-1a 64).
	for in, want := range map[string]string{
		"docker.io/iiidev/python:latest":  "docker.io-iiidev-python-latest-" + fnvHex("docker.io/iiidev/python:latest"),
		"iiidev/python":                   "docker.io-iiidev-python-latest-" + fnvHex("docker.io/iiidev/python:latest"),
		"alpine":                          "docker.io-library-alpine-latest-" + fnvHex("docker.io/library/alpine:latest"),
		"ghcr.io/a/b:1.2":                 "ghcr.io-a-b-1.2-" + fnvHex("ghcr.io/a/b:1.2"),
		"127.0.0.1:5000/iiidev/python:v1": "127.0.0.1-5000-iiidev-python-v1-" + fnvHex("127.0.0.1:5000/iiidev/python:v1"),
	} {
		if got, err := Slug(in); err != nil || got != want {
			t.Errorf("Slug(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Slug("UPPER/case"); err == nil {
		t.Error("invalid reference accepted")
	}
}

// fnvHex is the 64-bit FNV-1a of s in 16 hex digits, computed here from the published constants.
func fnvHex(s string) string {
	h := uint64(0xcbf29ce484222325)
	for _, b := range []byte(s) {
		h ^= uint64(b)
		h *= 0x100000001b3
	}
	return fmt.Sprintf("%016x", h)
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
	if p, ok := c.RootFS(ref); !ok || p != root || root != filepath.Join(c.Dir, "docker.io-iiidev-test-1-"+fnvHex("docker.io/iiidev/test:1")) {
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
	removeStale(c.Dir, 0)
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

// A registry on 127.0.0.1 (go-containerregistry's own) serves an image; Pull fetches it over
// plain HTTP with progress, into the 0.25 layout, and a second Pull asks the registry nothing.
func TestPullFromRegistry(t *testing.T) {
	var requests atomic.Int64
	reg := registry.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/iiidev/tiny:1"
	img, err := mutate.AppendLayers(empty.Image, static(t, layerTar(t, []entry{{name: "bin/sh", typ: tar.TypeReg, body: "#!", mode: 0o755}})))
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"A=1"}})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	requests.Store(0)

	c := NewCache(t.TempDir())
	var lines []string
	root, err := c.Pull(context.Background(), ref, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if requests.Load() == 0 || len(lines) < 2 || !strings.HasPrefix(lines[0], "pulling "+ref) || !strings.HasPrefix(lines[len(lines)-1], "pulled "+ref) {
		t.Fatalf("requests %d, progress %q", requests.Load(), lines)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "bin", "sh")); string(b) != "#!" {
		t.Fatalf("rootfs: %q", b)
	}
	if cfg, err := c.Config(ref); err != nil || len(cfg.Env) != 1 {
		t.Fatalf("config %+v %v", cfg, err)
	}
	requests.Store(0)
	if again, err := c.Pull(context.Background(), ref, nil); err != nil || again != root || requests.Load() != 0 {
		t.Fatalf("second pull: %q %v, %d requests", again, err, requests.Load())
	}
	if _, err := c.Pull(context.Background(), strings.TrimPrefix(srv.URL, "http://")+"/iiidev/missing:1", nil); err == nil {
		t.Fatal("a missing image pulled")
	}
}

// An entry laid out as 0.25 left it (the root filesystem in <slug>/, nothing beside it) is
// found as it is.
func TestEntryFrom025(t *testing.T) {
	c := NewCache(t.TempDir())
	dir := filepath.Join(c.Dir, "docker.io-iiidev-python-latest-"+fnvHex("docker.io/iiidev/python:latest"))
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, ok := c.RootFS("docker.io/iiidev/python:latest"); !ok || p != dir {
		t.Fatalf("RootFS = %q, %v", p, ok)
	}
	if _, err := c.Config("iiidev/python"); !os.IsNotExist(err) {
		t.Fatalf("config of a 0.25 entry: %v", err)
	}
}

func static(t *testing.T, data []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}
