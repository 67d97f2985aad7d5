package registry

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"github.com/iii-go/iii/internal/base/iiidir"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/state"
	"github.com/iii-go/iii/internal/base/fetch"
	"github.com/iii-go/iii/internal/base/procgroup"
	"github.com/iii-go/iii/internal/base/untar"
)

// markerFile inside an installed package records the SHA-256 of the archive it came from.
const markerFile = ".iii-package-sha256"

// progressThreshold is the size above which downloads print progress lines.
const progressThreshold = 1 << 20

// Caps of one install, so a hostile index or archive cannot fill the disk: a download stops at the
// size its index gives and at MaxArtifactSize; unpacking stops at MaxUnpackedSize bytes and
// MaxUnpackedFiles files. Each is PACKAGE_TOO_LARGE (PACKAGE_SIZE_MISMATCH for a size that
// disagrees with the index).
const (
	MaxArtifactSize  = 512 << 20
	MaxUnpackedSize  = 2 << 30
	MaxUnpackedFiles = 100000
)

// Prefixes of the cache's temporary entries; sweep removes those whose process is gone.
const (
	downloadPrefix = ".download-"
	unpackPrefix   = ".unpack-"
)

// CacheDir returns the shared package cache: <stateDir>/packages when stateDir
// ($III_COMPOSE_STATE_DIR) is set, else ~/.iii/compose/packages. No home directory is
// STATE_DIR_UNAVAILABLE.
func CacheDir(stateDir string) (string, error) {
	if root := stateDir; root != "" {
		abs, err := filepath.Abs(root)
		if err != nil {
			return "", errcode.New(errcode.StateDirUnavailable, "%s=%s: %w", state.EnvStateDir, root, err)
		}
		return filepath.Join(abs, "packages"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errcode.New(errcode.StateDirUnavailable, "no home directory for the package cache; set HOME or %s", state.EnvStateDir)
	}
	return iiidir.Under(home, iiidir.PackagesDir), nil
}

// Cache installs artifacts into a package cache directory.
type Cache struct {
	Dir string
	// Progress receives a line per quarter of a large download; nil prints nothing.
	Progress io.Writer

	// limits overrides the caps in tests; zero fields take the defaults.
	limits limits
	swept  bool
}

type limits struct {
	download, unpacked int64
	files              int
}

func (k *Cache) caps() limits {
	l := k.limits
	if l.download == 0 {
		l.download = MaxArtifactSize
	}
	if l.unpacked == 0 {
		l.unpacked = MaxUnpackedSize
	}
	if l.files == 0 {
		l.files = MaxUnpackedFiles
	}
	return l
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
		return Installed{}, errcode.New(errcode.IOError, "cannot create the package cache %s: %w", k.Dir, err)
	}
	if !k.swept {
		k.swept = true
		k.sweep()
	}
	archive, err := k.download(ctx, c, name, version, art)
	if err != nil {
		return Installed{}, err
	}
	defer os.Remove(archive)
	tmp, err := os.MkdirTemp(k.Dir, tempPattern(unpackPrefix, name))
	if err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot write the package cache %s: %w", k.Dir, err)
	}
	defer os.RemoveAll(tmp)
	n, err := extract(archive, tmp, k.caps())
	var big *untar.TooLargeError
	if errors.As(err, &big) {
		return Installed{}, errcode.New(errcode.PackageTooLarge, "%s %s: %s unpacks to %w; nothing was installed", name, version, art.URL, big)
	}
	if err != nil {
		return Installed{}, errcode.New(errcode.PackageDownloadFailed, "%s %s: cannot unpack %s: %w", name, version, art.URL, err)
	}
	if n == 0 {
		return Installed{}, errcode.New(errcode.PackageArtifactEmpty, "%s %s: %s holds no files", name, version, art.URL)
	}
	if err := os.WriteFile(filepath.Join(tmp, markerFile), []byte(art.SHA256+"\n"), 0o644); err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot write the package cache %s: %w", k.Dir, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot write the package cache %s: %w", k.Dir, err)
	}
	old := ""
	if _, err := os.Stat(dest); err == nil {
		old = dest + ".old-" + filepath.Base(tmp)
		if err := os.Rename(dest, old); err != nil {
			return Installed{}, errcode.New(errcode.IOError, "cannot replace %s: %w", dest, err)
		}
	}
	if err := os.Rename(tmp, dest); err != nil {
		return Installed{}, errcode.New(errcode.IOError, "cannot install %s: %w", dest, err)
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return Installed{Dir: dest, Fresh: true}, nil
}

// download fetches art into a temporary file of the cache, checking its size and digest. It
// reads at most the size the index gives (when it gives one) and MaxArtifactSize, and stops
// when ctx ends; the temporary file is removed on every failure.
func (k *Cache) download(ctx context.Context, c *Client, name, version string, art Artifact) (string, error) {
	limit := k.caps().download
	if art.Size < 0 {
		return "", errcode.New(errcode.PackageSizeMismatch, "%s %s: the registry gives %s a negative size (%d)", name, version, art.URL, art.Size)
	}
	if art.Size > limit {
		return "", tooLarge(name, version, art.URL, limit)
	}
	if art.Size > 0 {
		limit = art.Size
	}
	src, err := c.Fetch(ctx, art.URL, fetch.MaxSize(limit), fetch.SHA256(art.SHA256))
	if err != nil {
		if refused := k.refusal(name, version, art, 0, err); refused != nil {
			return "", refused
		}
		if e := errcode.As(err, ""); e.Code != "" {
			return "", errcode.New(e.Code, "%s %s: %s", name, version, e.Message)
		}
		return "", errcode.New(errcode.PackageDownloadFailed, "%s %s: cannot download %s: %w", name, version, art.URL, err)
	}
	defer src.Close()
	if art.Size > 0 && src.Size > 0 && src.Size != art.Size {
		return "", sizeMismatch(name, version, art.URL, src.Size, art.Size)
	}
	f, err := os.CreateTemp(k.Dir, tempPattern(downloadPrefix, name))
	if err != nil {
		return "", errcode.New(errcode.IOError, "cannot write the package cache %s: %w", k.Dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	var r io.Reader = src
	if k.Progress != nil && (src.Size > progressThreshold || src.Size <= 0) {
		r = &progressReader{r: r, total: src.Size, label: name + " " + version, out: k.Progress}
	}
	n, err := io.Copy(f, r)
	if err != nil {
		if refused := k.refusal(name, version, art, n, err); refused != nil {
			return "", refused
		}
		return "", errcode.New(errcode.PackageDownloadFailed, "%s %s: download of %s failed: %w", name, version, art.URL, err)
	}
	switch {
	case art.Size > 0 && n != art.Size:
		return "", sizeMismatch(name, version, art.URL, n, art.Size)
	case n == 0:
		return "", errcode.New(errcode.PackageArtifactEmpty, "%s %s: %s is empty", name, version, art.URL)
	}
	if err := f.Close(); err != nil {
		return "", errcode.New(errcode.IOError, "cannot write the package cache %s: %w", k.Dir, err)
	}
	ok = true
	return f.Name(), nil
}

// refusal gives the code of an artifact that broke a promise, once n bytes were read: more bytes
// than its index gives (PACKAGE_SIZE_MISMATCH) or than the cache takes (PACKAGE_TOO_LARGE), or
// another digest than the index and lock give. A digest is only known at the end, so a shorter
// or empty artifact is reported as such (PACKAGE_SIZE_MISMATCH, PACKAGE_ARTIFACT_EMPTY) rather
// than by its digest. It returns nil for any other failure.
func (k *Cache) refusal(name, version string, art Artifact, n int64, err error) error {
	var big *fetch.TooLargeError
	var bad *fetch.DigestError
	switch {
	case errors.As(err, &big):
		switch most := k.caps().download; {
		case big.Size > most:
			return tooLarge(name, version, art.URL, most)
		case art.Size > 0 && big.Size > 0:
			return sizeMismatch(name, version, art.URL, big.Size, art.Size)
		case art.Size > 0:
			return errcode.New(errcode.PackageSizeMismatch, "%s %s: %s is larger than the %d bytes its index gives; the download was stopped and nothing was installed", name, version, art.URL, art.Size)
		default:
			return tooLarge(name, version, art.URL, most)
		}
	case errors.As(err, &bad):
		switch {
		case art.Size > 0 && n != art.Size:
			return sizeMismatch(name, version, art.URL, n, art.Size)
		case n == 0:
			return errcode.New(errcode.PackageArtifactEmpty, "%s %s: %s is empty", name, version, art.URL)
		}
		return errcode.New(errcode.PackageDigestMismatch, "%s %s: %s has SHA-256 %s, but the registry and lock expect %s; nothing was installed", name, version, art.URL, bad.Got, art.SHA256)
	}
	return nil
}

func tooLarge(name, version, url string, limit int64) error {
	return errcode.New(errcode.PackageTooLarge, "%s %s: %s is larger than %d MiB, the most Compose downloads for one package; nothing was installed", name, version, url, limit>>20)
}

func sizeMismatch(name, version, url string, n, want int64) error {
	return errcode.New(errcode.PackageSizeMismatch, "%s %s: %s is %d bytes, but its index gives size %d; nothing was installed", name, version, url, n, want)
}

// tempPattern names a temporary entry of the cache after the process that owns it, so that
// sweep can tell a live install's files from an interrupted one's.
func tempPattern(prefix, name string) string {
	return fmt.Sprintf("%s%d-%s-", prefix, os.Getpid(), name)
}

// sweep removes the temporary downloads and unpack directories (and replaced installs) that an
// interrupted run left in the cache: those whose owning process is gone, and those named the
// way earlier versions named them, without a process id. Errors are ignored: a
// leftover costs disk space, never correctness.
func (k *Cache) sweep() {
	entries, err := os.ReadDir(k.Dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, downloadPrefix)
		if !ok {
			rest, ok = strings.CutPrefix(name, unpackPrefix)
		}
		if !ok {
			if _, tmp, old := strings.Cut(name, ".old-"+unpackPrefix); old {
				rest, ok = tmp, true
			}
		}
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err == nil && n > 0 && (n == os.Getpid() || procgroup.Alive(n)) {
			continue
		}
		os.RemoveAll(filepath.Join(k.Dir, name))
	}
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

// extract unpacks a .tar.gz into dir (regular files and directories only, an entry that leaves
// dir refused) and returns the number of files written. It stops with an *untar.TooLargeError
// past lim's bytes or files.
func extract(archive, dir string, lim limits) (int, error) {
	f, err := os.Open(archive)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return 0, err
	}
	return untar.Extract(gz, dir, untar.Options{Strict: true, MaxFiles: lim.files, MaxBytes: lim.unpacked})
}
