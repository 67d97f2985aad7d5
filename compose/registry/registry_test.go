package registry

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/compose/errcode"
)

func publishFixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.2.2", "0.3.0", "0.3.1", "0.4.0-rc.1"} {
		err := Publish(root, Package{Name: "tool", Version: v, Type: TypeBinary,
			Artifacts: map[string]string{"x86_64-unknown-linux-gnu": bin, "aarch64-apple-darwin": bin},
			Config:    map[string]any{"level": v}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := Publish(root, Package{Name: "tool", Version: "0.4.0-rc.1", Type: TypeBinary, Tags: []string{"next"},
		Artifacts: map[string]string{"x86_64-unknown-linux-gnu": bin}}); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestResolveSelectors(t *testing.T) {
	c, err := New(publishFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for sel, want := range map[string]string{"^0.3": "0.3.1", "^0.2": "0.2.2", "0.3.0": "0.3.0", "latest": "0.3.1", "next": "0.4.0-rc.1", "*": "0.3.1", "~0.3.0": "0.3.1"} {
		v, _, err := c.Resolve(ctx, "tool", sel)
		if err != nil || v.Version != want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", sel, v, err, want)
		}
	}
	v, _, _ := c.Resolve(ctx, "tool", "^0.3")
	if got := v.Shipped(); strings.Join(got, ",") != "aarch64-apple-darwin,x86_64-unknown-linux-gnu" || v.Config["level"] != "0.3.1" {
		t.Errorf("0.3.1: targets %v config %v", got, v.Config)
	}
	for sel, code := range map[string]string{"^9": errcode.PackageNotResolved, "stable": errcode.PackageNotResolved} {
		if _, _, err := c.Resolve(ctx, "tool", sel); errcode.CodeOf(err) != code {
			t.Errorf("Resolve(%q) err %v, want %s", sel, err, code)
		}
	}
	if _, _, err := c.Resolve(ctx, "nope", "*"); errcode.CodeOf(err) != errcode.PackageNotResolved {
		t.Errorf("missing package: %v", err)
	}
	if _, _, err := c.Resolve(ctx, "../etc", "*"); errcode.CodeOf(err) != errcode.RegistryNameRefused {
		t.Errorf("unsafe name: %v", err)
	}
	gone, _ := New(filepath.Join(t.TempDir(), "missing"))
	if _, _, err := gone.Resolve(ctx, "tool", "*"); errcode.CodeOf(err) != errcode.RegistryUnreachable {
		t.Errorf("missing registry: %v", err)
	}
}

func TestInstallOverHTTPAndDigest(t *testing.T) {
	root := publishFixture(t)
	srv := httptest.NewServer(http.FileServer(http.Dir(root)))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, _, err := c.Resolve(ctx, "tool", "^0.3")
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	cache := &Cache{Dir: t.TempDir(), Progress: &progress}
	art := v.Artifacts["x86_64-unknown-linux-gnu"]
	got, err := cache.Install(ctx, c, "tool", v.Version, "x86_64-unknown-linux-gnu", art)
	if err != nil || !got.Fresh {
		t.Fatalf("install: %+v %v", got, err)
	}
	if b, err := os.ReadFile(filepath.Join(got.Dir, "tool")); err != nil || !strings.Contains(string(b), "echo hi") {
		t.Fatalf("installed binary: %q %v", b, err)
	}
	again, err := cache.Install(ctx, c, "tool", v.Version, "x86_64-unknown-linux-gnu", art)
	if err != nil || again.Fresh {
		t.Fatalf("second install should hit the cache: %+v %v", again, err)
	}
	bad := art
	bad.SHA256 = strings.Repeat("0", 64)
	_, err = cache.Install(ctx, c, "tool", "0.3.0", "x86_64-unknown-linux-gnu", bad)
	if errcode.CodeOf(err) != errcode.PackageDigestMismatch {
		t.Fatalf("digest mismatch: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cache.Dir, InstallKey("tool", "0.3.0", "x86_64-unknown-linux-gnu"))); !os.IsNotExist(err) {
		t.Fatalf("a mismatching artifact left an install behind: %v", err)
	}
	entries, _ := os.ReadDir(cache.Dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left in the cache: %v", entries)
	}
}

func TestPublishIsDeterministic(t *testing.T) {
	a, b := publishFixture(t), publishFixture(t)
	for _, rel := range []string{"workers/tool/index.json", "workers/tool/0.3.1/tool-x86_64-unknown-linux-gnu.tar.gz"} {
		x, err1 := os.ReadFile(filepath.Join(a, rel))
		y, err2 := os.ReadFile(filepath.Join(b, rel))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two identical publishes (%v %v)", rel, err1, err2)
		}
	}
	c, _ := New(a)
	ix, err := c.Index(context.Background(), "tool")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, v := range ix.Versions {
		order = append(order, v.Version)
	}
	if got := strings.Join(order, ","); got != "0.4.0-rc.1,0.3.1,0.3.0,0.2.2" || ix.Tags["latest"] != "0.3.1" || ix.Tags["next"] != "0.4.0-rc.1" {
		t.Fatalf("versions %s tags %v", got, ix.Tags)
	}
}
