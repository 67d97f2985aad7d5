package release

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestArchivesAreReproducibleAndSorted(t *testing.T) {
	files := []File{{Name: "b", Mode: 0o644, Data: []byte("bee")}, {Name: "a", Mode: 0o755, Data: []byte("ay")}}
	for _, format := range []string{"tar.gz", "zip"} {
		dir := t.TempDir()
		p1, p2 := filepath.Join(dir, "one."+format), filepath.Join(dir, "two."+format)
		if err := WriteArchive(p1, format, files); err != nil {
			t.Fatal(err)
		}
		if err := WriteArchive(p2, format, files); err != nil {
			t.Fatal(err)
		}
		b1, _ := os.ReadFile(p1)
		b2, _ := os.ReadFile(p2)
		if !bytes.Equal(b1, b2) {
			t.Errorf("%s: two writes differ", format)
		}
		if got := entryNames(t, format, b1); !cmp.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s: entries %v, want sorted [a b]", format, got)
		}
	}
}

func entryNames(t *testing.T, format string, data []byte) []string {
	var names []string
	if format == "zip" {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range zr.File {
			if !f.Modified.Equal(Epoch) {
				t.Errorf("zip entry %s mtime %v", f.Name, f.Modified)
			}
			names = append(names, f.Name)
		}
		return names
	}
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(Epoch) {
			t.Errorf("tar entry %s: uid %d gid %d mtime %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		names = append(names, h.Name)
	}
}

func TestTargetTable(t *testing.T) {
	var adapter []string
	for _, tg := range Targets {
		if tg.Ships("sandbox-libkrun") {
			adapter = append(adapter, tg.Triple)
		}
		if !tg.Ships("iii") {
			t.Errorf("%s does not ship iii", tg.Triple)
		}
	}
	want := []string{"aarch64-apple-darwin", "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"}
	if diff := cmp.Diff(want, adapter); diff != "" {
		t.Errorf("adapter targets (-want +got):\n%s", diff)
	}
	for _, p := range Products {
		if p.Name == "iii-worker" || p.Name == "iii-init" {
			t.Errorf("product %s must not ship in 0.26", p.Name)
		}
	}
}

// Each adapter target carries the firmware of its own guest architecture; Apple Silicon's guests
// are aarch64 Linux.
func TestFirmwarePerTarget(t *testing.T) {
	got := map[string]string{}
	for _, tg := range Targets {
		if tg.Ships("sandbox-libkrun") {
			got[tg.Triple] = tg.FirmwareTriple()
		}
	}
	want := map[string]string{
		"aarch64-apple-darwin":      "aarch64-unknown-linux-gnu",
		"x86_64-unknown-linux-gnu":  "x86_64-unknown-linux-gnu",
		"aarch64-unknown-linux-gnu": "aarch64-unknown-linux-gnu",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("firmware per target (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"aarch64-unknown-linux-gnu", "x86_64-unknown-linux-gnu"}, FirmwareTriples()); diff != "" {
		t.Errorf("FirmwareTriples (-want +got):\n%s", diff)
	}
}

// The adapter's published configuration is read from its file beside the adapter; products
// without one publish none.
func TestReadDefaultConfig(t *testing.T) {
	adapter, ok := ProductNamed("sandbox-libkrun")
	if !ok {
		t.Fatal("no sandbox-libkrun product")
	}
	config, err := ReadDefaultConfig("../..", adapter)
	if err != nil || config["auto_install"] != true || config["default_memory_mb"] != float64(512) {
		t.Fatalf("sandbox-libkrun config = %v, %v", config, err)
	}
	iii, _ := ProductNamed("iii")
	if config, err := ReadDefaultConfig("../..", iii); config != nil || err != nil {
		t.Fatalf("iii config = %v, %v; want none", config, err)
	}
	if got := TriplesOf("sandbox-libkrun"); len(got) != 3 || got[0] != "aarch64-apple-darwin" {
		t.Fatalf("TriplesOf(sandbox-libkrun) = %q", got)
	}
}
