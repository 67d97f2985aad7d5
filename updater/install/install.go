// Package install puts a binary from a release archive into the install directory atomically:
// the binary is written to a temporary file beside its destination, made mode 0755 and renamed
// over the old one, so a reader sees the old binary or the new one, never a partial file.
package install

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/iii-go/iii/internal/base/procgroup"
	"github.com/iii-go/iii/updater/errcode"
)

// DirEnv names the variable that overrides the install directory.
const DirEnv = "BIN_DIR"

// Dir returns binDir ($BIN_DIR) made absolute, or ~/.local/bin when it is "".
func Dir(binDir string) (string, error) {
	if d := binDir; d != "" {
		return filepath.Abs(d)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", errcode.New(errcode.InstallFailed, "cannot find the home directory: %w", err)
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
		return nil, errcode.New(errcode.BadArchive, "%s: %w", assetName, err)
	}
	if !found {
		return nil, errcode.New(errcode.BadArchive, "%s holds no %s", assetName, exe)
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
// mode 0755, synced, checked by check (when not nil) and then renamed over dest. A failed
// check leaves dest untouched.
func Write(dest string, data []byte, check func(path string) error) error {
	dir := filepath.Dir(dest)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errcode.New(errcode.InstallFailed, "cannot create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, fmt.Sprintf("%sp%d-", tempPrefix(dest), os.Getpid()))
	if err != nil {
		return errcode.New(errcode.InstallFailed, "cannot write into %s: %w", dir, err)
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
	if err != nil {
		return errcode.New(errcode.InstallFailed, "cannot install %s: %w", dest, err)
	}
	if check != nil {
		if err := check(tmp.Name()); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return errcode.New(errcode.InstallFailed, "cannot install %s: %w", dest, err)
	}
	return nil
}

// tempPrefix starts the name of Write's temporary files for dest: .iii.new-, followed by
// p<pid>- since the pid names the writer (earlier versions wrote .iii.new-<random>).
func tempPrefix(dest string) string { return "." + filepath.Base(dest) + ".new-" }

// Sweep removes the temporary files an interrupted Write for dest left in its directory (review
// #56): those of a process that is gone, and those named without a process id. It returns the
// names it removed.
func Sweep(dest string) []string {
	dir, prefix := filepath.Dir(dest), tempPrefix(dest)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if p, ok := strings.CutPrefix(rest, "p"); ok {
			pid, _, _ := strings.Cut(p, "-")
			if n, err := strconv.Atoi(pid); err == nil && n > 0 && (n == os.Getpid() || procgroup.Alive(n)) {
				continue
			}
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			removed = append(removed, e.Name())
		}
	}
	return removed
}

// versionTimeout bounds CheckVersion.
const versionTimeout = 10 * time.Second

// CheckVersion runs `path --version` for the binary called name and requires it to exit 0 and
// print version (a field of its last line, v prefix allowed) within 10 s: a release whose
// binary does not run (an empty or foreign file) or is another version is never
// swapped in.
func CheckVersion(ctx context.Context, path, name, version string) error {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	if err != nil {
		var pe *fs.PathError
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("no answer within %v", versionTimeout)
		case errors.As(err, &pe):
			err = pe.Err
		}
		if text != "" {
			err = fmt.Errorf("%w: %s", err, text)
		}
		return errcode.New(errcode.BinaryCheckFailed, "the new %s (v%s) does not run here: `%s --version`: %w", name, version, name, err)
	}
	lines := strings.Split(text, "\n")
	for _, f := range strings.Fields(lines[len(lines)-1]) {
		if strings.TrimPrefix(f, "v") == version {
			return nil
		}
	}
	return errcode.New(errcode.BinaryCheckFailed, "the new %s says it is %q, not v%s", name, text, version)
}
