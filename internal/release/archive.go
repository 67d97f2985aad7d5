package release

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Epoch is the modification time written for every archive entry, so that two builds of the same
// sources give byte-identical archives.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// File is one entry of an archive.
type File struct {
	Name string      // path inside the archive
	Mode fs.FileMode // permission bits
	Data []byte
}

// WriteArchive writes files into path as "tar.gz" or "zip", entries sorted by name.
func WriteArchive(path, format string, files []File) error {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	return writeAtomic(path, func(w io.Writer) error {
		switch format {
		case "tar.gz":
			return writeTarGz(w, sorted)
		case "zip":
			return writeZip(w, sorted)
		}
		return fmt.Errorf("unknown archive format %q", format)
	})
}

func writeTarGz(w io.Writer, files []File) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		hdr := &tar.Header{
			Name: f.Name, Mode: int64(f.Mode.Perm()), Size: int64(len(f.Data)),
			ModTime: Epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX,
			Uname: "root", Gname: "root",
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeZip(w io.Writer, files []File) error {
	zw := zip.NewWriter(w)
	for _, f := range files {
		hdr := &zip.FileHeader{Name: f.Name, Method: zip.Deflate, Modified: Epoch}
		hdr.SetMode(f.Mode.Perm())
		fw, err := zw.CreateHeader(hdr)
		if err != nil {
			return err
		}
		if _, err := fw.Write(f.Data); err != nil {
			return err
		}
	}
	return zw.Close()
}

// writeAtomic writes path through a temporary file in the same directory and a rename.
func writeAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// SHA256File returns the hex SHA-256 digest and size of a file.
func SHA256File(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// ChecksumLine is one line of a sha256sum-compatible file: "<hex>  <name>\n".
func ChecksumLine(sum, name string) string { return sum + "  " + name + "\n" }
