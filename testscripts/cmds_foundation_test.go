package testscripts

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	registerCmd("unpack", cmdUnpack)
}

// unpack ARCHIVE DIR: extract a .tar.gz or .zip into DIR (regular files only, modes kept).
func cmdUnpack(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: unpack ARCHIVE DIR")
	}
	src, dst := ts.MkAbs(args[0]), ts.MkAbs(args[1])
	ts.Check(os.MkdirAll(dst, 0o755))
	write := func(name string, mode os.FileMode, r io.Reader) {
		clean := filepath.Clean(name)
		if filepath.IsAbs(clean) || strings.HasPrefix(clean, "..") {
			ts.Fatalf("unpack: unsafe entry %q", name)
		}
		p := filepath.Join(dst, clean)
		ts.Check(os.MkdirAll(filepath.Dir(p), 0o755))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode.Perm())
		ts.Check(err)
		_, err = io.Copy(f, r)
		ts.Check(err)
		ts.Check(f.Close())
	}
	if strings.HasSuffix(src, ".zip") {
		zr, err := zip.OpenReader(src)
		ts.Check(err)
		defer zr.Close()
		for _, f := range zr.File {
			rc, err := f.Open()
			ts.Check(err)
			write(f.Name, f.Mode(), rc)
			rc.Close()
		}
		return
	}
	f, err := os.Open(src)
	ts.Check(err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	ts.Check(err)
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		ts.Check(err)
		if h.Typeflag == tar.TypeReg {
			write(h.Name, os.FileMode(h.Mode), tr)
		}
	}
}
