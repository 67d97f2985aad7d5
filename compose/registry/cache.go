package registry

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/state"
)

// markerFile inside an installed package records the SHA-256 of the archive it came from.
const markerFile = ".iii-package-sha256"

// progressThreshold is the size above which downloads print progress lines.
const progressThreshold = 1 << 20

// CacheDir returns the shared package cache: $III_COMPOSE_STATE_DIR/packages when set, else
// ~/.iii/compose/packages. No home directory is STATE_DIR_UNAVAILABLE.
func CacheDir() (string, error) {
	if root := os.Getenv(state.EnvStateDir); root != "" {
		abs, err := filepath.Abs(root)
		if err != nil {
			return "", errcode.New(errcode.StateDirUnavailable, "%s=%s: %v", state.EnvStateDir, root, err)
		}
		return filepath.Join(abs, "packages"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errcode.New(errcode.StateDirUnavailable, "no home directory for the package cache; set HOME or %s", state.EnvStateDir)
	}
	return filepath.Join(home, ".iii", "compose", "packages"), nil
}

// Cache installs artifacts into a package cache directory.
type Cache struct {
	Dir string
	// Progress receives a line per quarter of a large download; nil prints nothing.
	Progress io.Writer
}

// InstallKey names a package's directory in the cache: <name>-<version>-<target|bundle>.
func InstallKey(name, version, target string) string { return name + "-" + version + "-" + target }

// Installed is a package unpacked in the cache.
type Installed struct {
	// Dir is the package's directory; Fresh says this call downloaded it.
	Dir   string
	Fresh bool
}

// Install makes sure the artifact for name@version on target (or BundleKey) is unpacked in the
// cache, downloading it through c when missing or from a different digest. The archive's
// SHA-256 must equal art.SHA256 (PACKAGE_DIGEST_MISMATCH otherwise); the directory appears
// atomically, so readers never see a partial install.
func (k *Cache) Install(ctx context.Context, c *Client, name, version, target string, art Artifact) (Installed, error) {
	for _, s := range []string{name, version} {
		if err := CheckName("package", s); err != nil {
			return Installed{}, err
		}
	}
	dest := filepath.Join(k.Dir, InstallKey(name, version, target))
	if b, err := os.ReadFile(filepath.Join(dest, markerFile)); err == nil && strings.TrimSpace(string(b)) == art.SHA256 {
		return Installed{Dir: dest}, nil
	}
	if err := os.MkdirAll(k.Dir, 0o755); err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot create the package cache %s: %v", k.Dir, err)
	}
	archive, err := k.download(ctx, c, name, version, art)
	if err != nil {
		return Installed{}, err
	}
	defer os.Remove(archive)
	tmp, err := os.MkdirTemp(k.Dir, ".unpack-"+name+"-")
	if err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot write the package cache %s: %v", k.Dir, err)
	}
	defer os.RemoveAll(tmp)
	n, err := extract(archive, tmp)
	if err != nil {
		return Installed{}, errcode.New(errcode.PackageDownloadFailed, "%s %s: cannot unpack %s: %v", name, version, art.URL, err)
	}
	if n == 0 {
		return Installed{}, errcode.New(errcode.PackageArtifactEmpty, "%s %s: %s holds no files", name, version, art.URL)
	}
	if err := os.WriteFile(filepath.Join(tmp, markerFile), []byte(art.SHA256+"\n"), 0o644); err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot write the package cache %s: %v", k.Dir, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot write the package cache %s: %v", k.Dir, err)
	}
	old := ""
	if _, err := os.Stat(dest); err == nil {
		old = dest + ".old-" + filepath.Base(tmp)
		if err := os.Rename(dest, old); err != nil {
			return Installed{}, errcode.New(errcode.IOError, "cannot replace %s: %v", dest, err)
		}
	}
	if err := os.Rename(tmp, dest); err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot install %s: %v", dest, err)
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return Installed{Dir: dest, Fresh: true}, nil
}

// download fetches art into a temporary file of the cache, checking its size and digest.
func (k *Cache) download(ctx context.Context, c *Client, name, version string, art Artifact) (string, error) {
	rc, size, err := c.Fetch(ctx, art.URL)
	if err != nil {
		return "", errcode.New(errcode.PackageDownloadFailed, "%s %s: cannot download %s: %v", name, version, art.URL, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp(k.Dir, ".download-"+name+"-")
	if err != nil {
		return "", errcode.New(errcode.IOError, "cannot write the package cache %s: %v", k.Dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	var r io.Reader = rc
	if k.Progress != nil && (size > progressThreshold || size <= 0) {
		r = &progressReader{r: rc, total: size, label: name + " " + version, out: k.Progress}
	}
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		return "", errcode.New(errcode.PackageDownloadFailed, "%s %s: download of %s failed: %v", name, version, art.URL, err)
	}
	if n == 0 {
		return "", errcode.New(errcode.PackageArtifactEmpty, "%s %s: %s is empty", name, version, art.URL)
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, art.SHA256) {
		return "", errcode.New(errcode.PackageDigestMismatch, "%s %s: %s has SHA-256 %s, but the registry and lock expect %s; nothing was installed", name, version, art.URL, got, art.SHA256)
	}
	if err := f.Close(); err != nil {
		return "", errcode.New(errcode.IOError, "cannot write the package cache %s: %v", k.Dir, err)
	}
	ok = true
	return f.Name(), nil
}

type progressReader struct {
	r          io.Reader
	total, n   int64
	label      string
	out        io.Writer
	lastQuart  int64
	lastPrintN int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	const mib = 1 << 20
	if p.total > 0 {
		if q := p.n * 4 / p.total; q > p.lastQuart {
			p.lastQuart = q
			fmt.Fprintf(p.out, "  downloading %s: %3d%% (%.1f of %.1f MiB)\n", p.label, q*25, float64(p.n)/mib, float64(p.total)/mib)
		}
	} else if p.n-p.lastPrintN >= 4*mib || (errors.Is(err, io.EOF) && p.n > p.lastPrintN) {
		p.lastPrintN = p.n
		fmt.Fprintf(p.out, "  downloading %s: %.1f MiB\n", p.label, float64(p.n)/mib)
	}
	return n, err
}

// extract unpacks a .tar.gz into dir (regular files and directories only, no path escapes) and
// returns the number of files written.
func extract(archive, dir string) (int, error) {
	f, err := os.Open(archive)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return 0, err
	}
	tr := tar.NewReader(gz)
	files := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return files, err
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return files, fmt.Errorf("unsafe entry %q", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return files, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return files, err
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, os.FileMode(h.Mode).Perm()|0o400)
			if err != nil {
				return files, err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return files, err
			}
			files++
		}
	}
}
