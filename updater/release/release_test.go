package release

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/iii-go/iii/updater/errcode"
	"github.com/iii-go/iii/updater/internal/treetest"
)

const triple = "x86_64-unknown-linux-gnu"

func tree(t *testing.T) string {
	root := t.TempDir()
	treetest.Write(t, root, "0.25.0", false,
		treetest.Binary{Name: "iii", Target: triple, Data: []byte("old")},
		treetest.Binary{Name: "iii-init", Target: triple, Data: []byte("init")})
	treetest.Write(t, root, "0.26.0", true, treetest.Binary{Name: "iii", Target: triple, Data: []byte("new")})
	return root
}

// sources returns the same tree over file:// and http://.
func sources(t *testing.T, root string) map[string]*Source {
	srv := httptest.NewServer(http.FileServer(http.Dir(root)))
	t.Cleanup(srv.Close)
	return map[string]*Source{"file": {Base: "file://" + root}, "http": {Base: srv.URL}}
}

func TestResolve(t *testing.T) {
	for scheme, s := range sources(t, tree(t)) {
		for want, v := range map[string]string{"": "0.26.0", "latest": "0.26.0", "0.25.0": "0.25.0", "v0.25.0": "0.25.0", "iii/v0.25.0": "0.25.0"} {
			got, err := s.Resolve(context.Background(), want)
			if err != nil || got != v {
				t.Errorf("%s: Resolve(%q) = %q, %v; want %q", scheme, want, got, err, v)
			}
		}
		if _, err := s.Resolve(context.Background(), "0.24.0"); errcode.CodeOf(err) != errcode.ReleaseNotFound {
			t.Errorf("%s: Resolve(0.24.0) error %v, want %s", scheme, err, errcode.ReleaseNotFound)
		}
		if _, err := s.Resolve(context.Background(), "banana"); errcode.CodeOf(err) != errcode.ReleaseNotFound {
			t.Errorf("%s: Resolve(banana) error %v, want %s", scheme, err, errcode.ReleaseNotFound)
		}
	}
}

func TestFetchVerifiesDigest(t *testing.T) {
	root := tree(t)
	for scheme, s := range sources(t, root) {
		m, err := s.Manifest(context.Background(), "0.26.0")
		if err != nil {
			t.Fatal(err)
		}
		a, ok := m.Find("iii", triple)
		if !ok {
			t.Fatalf("%s: no iii asset in %+v", scheme, m)
		}
		if _, err := s.Fetch(context.Background(), m.Version, a); err != nil {
			t.Errorf("%s: Fetch: %v", scheme, err)
		}
		if _, ok := m.Find("iii-init", triple); ok {
			t.Errorf("%s: 0.26.0 lists iii-init", scheme)
		}
	}
	path := filepath.Join(root, "iii", "v0.26.0", "iii-"+triple+".tar.gz")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("junk")
	f.Close()
	for scheme, s := range sources(t, root) {
		m, _ := s.Manifest(context.Background(), "0.26.0")
		a, _ := m.Find("iii", triple)
		data, err := s.Fetch(context.Background(), m.Version, a)
		if errcode.CodeOf(err) != errcode.ChecksumMismatch || data != nil {
			t.Errorf("%s: corrupt asset: data %d bytes, error %v; want %s", scheme, len(data), err, errcode.ChecksumMismatch)
		}
	}
}

func TestAssetNotFoundText(t *testing.T) {
	var err error = &AssetNotFoundError{Target: triple, Binary: "iii-init"}
	want := "Release asset not found for platform x86_64-unknown-linux-gnu: iii-init"
	if err.Error() != want || errcode.CodeOf(err) != "" {
		t.Errorf("got %q (code %q), want %q without code", err, errcode.CodeOf(err), want)
	}
	var nf *AssetNotFoundError
	if !errors.As(err, &nf) {
		t.Error("errors.As failed")
	}
}

func TestParseChecksum(t *testing.T) {
	sum := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789ABCDEF"
	for _, text := range []string{sum, sum + "  a.tar.gz\n", sum + " *a.tar.gz"} {
		got, err := ParseChecksum(text, "a.tar.gz")
		if err != nil || got != "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
			t.Errorf("ParseChecksum(%q) = %q, %v", text, got, err)
		}
	}
	for _, text := range []string{"", "zz", sum + "  b.tar.gz"} {
		if _, err := ParseChecksum(text, "a.tar.gz"); errcode.CodeOf(err) != errcode.ChecksumMismatch {
			t.Errorf("ParseChecksum(%q) error %v", text, err)
		}
	}
}
