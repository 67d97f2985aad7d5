// Package treetest writes small release trees for the updater's unit tests.
package treetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Binary is one asset to publish: a file named Name inside <Name>-<Target>.tar.gz.
type Binary struct {
	Name, Target string
	Data         []byte
}

// TarGz returns a .tar.gz holding one 0755 file.
func TarGz(t testing.TB, name string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Write publishes version under root/iii/v<version>/ with manifest.json and sidecars, and
// points root/iii/latest at it when latest is true.
func Write(t testing.TB, root, version string, latest bool, bins ...Binary) {
	t.Helper()
	dir := filepath.Join(root, "iii", "v"+version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	type asset struct {
		Name    string `json:"asset"`
		Product string `json:"product"`
		Version string `json:"version"`
		Target  string `json:"target"`
		SHA256  string `json:"sha256"`
	}
	var assets []asset
	for _, b := range bins {
		name := b.Name + "-" + b.Target + ".tar.gz"
		data := TarGz(t, b.Name, b.Data)
		sum := sha256.Sum256(data)
		hexSum := hex.EncodeToString(sum[:])
		mustWrite(t, filepath.Join(dir, name), data)
		mustWrite(t, filepath.Join(dir, name+".sha256"), []byte(hexSum+"  "+name+"\n"))
		assets = append(assets, asset{name, b.Name, version, b.Target, hexSum})
	}
	m, err := json.Marshal(map[string]any{"version": version, "assets": assets})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "manifest.json"), m)
	if latest {
		mustWrite(t, filepath.Join(root, "iii", "latest"), []byte(version+"\n"))
	}
}

func mustWrite(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
