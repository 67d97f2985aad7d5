// Package install puts a binary from a release archive into the install directory atomically:
// the binary is written to a temporary file beside its destination, made mode 0755 and renamed
// over the old one, so a reader sees the old binary or the new one, never a partial file.
package install

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/updater/errcode"
)

// DirEnv names the variable that overrides the install directory.
const DirEnv = "BIN_DIR"

// Dir returns $BIN_DIR, or ~/.local/bin.
func Dir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return filepath.Abs(d)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", errcode.Errorf(errcode.InstallFailed, "cannot find the home directory: %v", err)
	}
	return filepath.Join(home, ".local", "bin"), nil
}

// Extract returns the contents of the regular file named exe in a .tar.gz or .zip archive
// (assetName tells which), at its root or in one directory.
func Extract(archive []byte, assetName, exe string) ([]byte, error) {
	var (
		data  []byte
		found bool
		err   error
	)
	if strings.HasSuffix(assetName, ".zip") {
		data, found, err = fromZip(archive, exe)
	} else {
		data, found, err = fromTarGz(archive, exe)
	}
	if err != nil {
		return nil, errcode.Errorf(errcode.BadArchive, "%s: %v", assetName, err)
	}
	if !found {
		return nil, errcode.Errorf(errcode.BadArchive, "%s holds no %s", assetName, exe)
	}
	return data, nil
}

// matches reports whether an archive entry name is exe at the root or one level down.
func matches(name, exe string) bool {
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	return clean == exe || (path.Base(clean) == exe && strings.Count(clean, "/") == 1)
}

func fromTarGz(archive []byte, exe string) ([]byte, bool, error) {
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, false, err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if h.Typeflag == tar.TypeReg && matches(h.Name, exe) {
			b, err := io.ReadAll(tr)
			return b, err == nil, err
		}
	}
}

func fromZip(archive []byte, exe string) ([]byte, bool, error) {
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		return nil, false, err
	}
	for _, f := range zr.File {
		if f.Mode().IsRegular() && matches(f.Name, exe) {
			rc, err := f.Open()
			if err != nil {
				return nil, false, err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			return b, err == nil, err
		}
	}
	return nil, false, nil
}

// Write installs data as dest: a temporary file in dest's directory (created if missing),
// mode 0755, synced, then renamed over dest.
func Write(dest string, data []byte) error {
	dir := filepath.Dir(dest)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errcode.Errorf(errcode.InstallFailed, "cannot create %s: %v", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dest)+".new-")
	if err != nil {
		return errcode.Errorf(errcode.InstallFailed, "cannot write into %s: %v", dir, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dest)
	}
	if err != nil {
		return errcode.Errorf(errcode.InstallFailed, "cannot install %s: %v", dest, err)
	}
	return nil
}
