// Package image keeps the root filesystem cache of sandbox images: OCI images (pulled from a
// registry over the OCI distribution API with go-containerregistry, or imported from an OCI
// image layout) flattened into <cache>/<slug>/, where <cache> is ~/.iii/cache. The layout is the
// one 0.25 used, so images it pulled are found and not pulled again (req J3): the directory is
// the root filesystem itself and <slug> is the image's canonical reference made safe for a file
// name plus an FNV-1a hash of it (Slug). Beside each entry, <slug>.json records the reference,
// digest and runtime config of an image this package installed; a 0.25 entry has none and runs
// with the image defaults.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/iii-go/iii/internal/base/iiidir"
	"github.com/iii-go/iii/internal/base/untar"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
)

// ErrNoBin marks an image whose root filesystem has no bin/ (usually: no linux/<arch> image).
var ErrNoBin = errors.New("image root filesystem has no bin/ (no linux image for this host's architecture?)")

// RefAnnotation names the reference of an image inside an OCI layout's index.
const RefAnnotation = "org.opencontainers.image.ref.name"

// DefaultDir is the cache directory: $III_CACHE_DIR of getenv (the caller's environment, os.Getenv
// in a main; nil is an empty one), else ~/.iii/cache (HOME honoured).
func DefaultDir(getenv func(string) string) string { return iiidir.Env{Getenv: getenv}.Cache() }

// Cache is a rootfs cache directory. It is safe for concurrent use within a process; across
// processes an install is atomic (extract to a temporary directory, then rename).
type Cache struct {
	Dir    string
	GOARCH string // the architecture of the images it holds and pulls (Go's name)
	mu     sync.Mutex
	ref    map[string]*sync.Mutex
}

// NewCache returns the cache at dir (~/.iii/cache when empty: DefaultDir of no variables) of
// images of the host's architecture.
func NewCache(dir string) *Cache {
	if dir == "" {
		dir = DefaultDir(nil)
	}
	return &Cache{Dir: dir, GOARCH: runtime.GOARCH, ref: map[string]*sync.Mutex{}}
}

// NewCacheFor returns the cache at dir of images of guest architecture a.
func NewCacheFor(dir string, a guestarch.Arch) *Cache {
	c := NewCache(dir)
	c.GOARCH = a.GOARCH
	return c
}

// DirFor is the cache directory of images of guest architecture a under the cache directory
// dir: dir itself for the host's architecture, so the entries keep 0.25's names and 0.25's
// entries are found (req J3); the subdirectory <arch> for another one. The 0.25 slug names no
// architecture, so the images of a guest run under emulation live apart rather than under a
// name 0.25 would read as its own.
func DirFor(dir string, a guestarch.Arch) string {
	if a.Native() {
		return dir
	}
	return filepath.Join(dir, a.Name)
}

// Canonical returns the whole form of ref as 0.25 wrote it: registry, repository and tag (or
// digest) with every default filled in, Docker Hub as "docker.io" (e.g.
// "docker.io/library/alpine:latest" for "alpine").
func Canonical(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	reg := r.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	sep := ":"
	if _, ok := r.(name.Digest); ok {
		sep = "@"
	}
	return reg + "/" + r.Context().RepositoryStr() + sep + r.Identifier(), nil
}

// Slug is the cache directory name of ref, as 0.25 named it: the canonical form lower-cased,
// every character other than letters, digits, '.', '-' and '_' turned into '-', runs of '-'
// folded and '-', '.', '_' trimmed at both ends, then "-" and the 64-bit FNV-1a hash of the
// canonical form in 16 hex digits (so refs that fold to the same text never share an entry).
func Slug(ref string) (string, error) {
	c, err := Canonical(ref)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, r := range c {
		switch {
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + 'a' - 'A')
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		case !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	h := fnv.New64a()
	h.Write([]byte(c))
	base := strings.Trim(b.String(), "-._")
	if base == "" {
		base = "image"
	}
	return fmt.Sprintf("%s-%016x", base, h.Sum64()), nil
}

// Path returns <cache>/<slug> for ref, the root filesystem's directory, whether or not it
// exists.
func (c *Cache) Path(ref string) (string, error) {
	s, err := Slug(ref)
	if err != nil {
		return "", err
	}
	return filepath.Join(c.Dir, s), nil
}

// RootFS returns the cached root filesystem of ref and whether it is present (it has a bin/).
// An entry that is a symbolic link is returned resolved (virtiofsd serves only directories).
func (c *Cache) RootFS(ref string) (string, bool) {
	p, err := c.Path(ref)
	if err != nil {
		return "", false
	}
	if _, err := os.Lstat(filepath.Join(p, "bin")); err != nil {
		return p, false
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return p, true
}

func (c *Cache) lock(ref string) func() {
	c.mu.Lock()
	m := c.ref[ref]
	if m == nil {
		m = &sync.Mutex{}
		c.ref[ref] = m
	}
	c.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Pull fetches ref for linux/<host arch> from its registry over the OCI distribution API and
// installs it, unless it is cached. Registries on a loopback address are spoken to over plain
// HTTP, every other one over HTTPS. progress, when not nil, gets a line as the pull starts, as
// each layer completes and at the end.
func (c *Cache) Pull(ctx context.Context, ref string, progress func(string)) (string, error) {
	if p, ok := c.RootFS(ref); ok {
		return p, nil
	}
	if progress == nil {
		progress = func(string) {}
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: c.GOARCH}))
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	var total int64
	for _, l := range layers {
		if n, err := l.Size(); err == nil {
			total += n
		}
	}
	progress(fmt.Sprintf("pulling %s: %d layer(s), %.1f MB to download", ref, len(layers), float64(total)/1e6))
	p, err := c.install(ref, img, func(bytes int64) {
		progress(fmt.Sprintf("pulling %s: %.1f MB extracted", ref, float64(bytes)/1e6))
	})
	if err != nil {
		return "", err
	}
	progress(fmt.Sprintf("pulled %s into %s", ref, p))
	return p, nil
}

// ImportLayout installs from the OCI image layout at dir the image annotated with ref (or the
// only image when the layout holds one) under ref.
func (c *Cache) ImportLayout(dir, ref string) (string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return "", err
	}
	man, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	canon, err := Canonical(ref)
	if err != nil {
		return "", err
	}
	var pick *v1.Descriptor
	for i, d := range man.Manifests {
		if a := d.Annotations[RefAnnotation]; a == ref || a == canon {
			pick = &man.Manifests[i]
			break
		}
	}
	if pick == nil && len(man.Manifests) == 1 {
		pick = &man.Manifests[0]
	}
	if pick == nil {
		return "", fmt.Errorf("OCI layout %s has no image named %s", dir, ref)
	}
	img, err := idx.Image(pick.Digest)
	if err != nil {
		return "", err
	}
	return c.Install(ref, img)
}

// Meta is what <slug>.json records beside an entry this package installed.
type Meta struct {
	Ref    string    `json:"ref"`
	Digest string    `json:"digest"`
	Config v1.Config `json:"config"`
}

// Install flattens img into the cache entry of ref, replacing what was there.
func (c *Cache) Install(ref string, img v1.Image) (string, error) {
	return c.install(ref, img, nil)
}

// install extracts img into a temporary directory beside the entry and renames it into place,
// so a reader sees a whole root filesystem or none; progress, when not nil, is told how far the
// extraction got.
func (c *Cache) install(ref string, img v1.Image, progress func(bytes int64)) (string, error) {
	defer c.lock(ref)()
	dst, err := c.Path(ref)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", err
	}
	removeStale(c.Dir, time.Hour)
	tmp, err := os.MkdirTemp(c.Dir, ".tmp-"+filepath.Base(dst)+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := extractImage(img, tmp, progress); err != nil {
		return "", fmt.Errorf("extract %s: %w", ref, err)
	}
	if _, err := os.Lstat(filepath.Join(tmp, "bin")); err != nil {
		return "", ErrNoBin
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	meta := Meta{}
	meta.Ref, _ = Canonical(ref)
	if cf, err := img.ConfigFile(); err == nil {
		meta.Config = cf.Config
	}
	if d, err := img.Digest(); err == nil {
		meta.Digest = d.String()
	}
	// The replaced rootfs may still be served to running VMs: it is set aside and removed by a
	// later install once it is old enough that no sandbox can still be using it.
	_ = os.Rename(dst, dst+fmt.Sprintf(".old-%d", time.Now().UnixNano()))
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	if b, err := json.MarshalIndent(meta, "", "  "); err == nil {
		_ = os.WriteFile(dst+".json", append(b, '\n'), 0o644)
	}
	return dst, nil
}

// progressStep is how many bytes of flattened image are extracted between progress calls.
const progressStep = 16 << 20

// extractImage flattens img's layers (whiteouts applied) onto dir, telling progress, when not
// nil, every progressStep bytes and at the end.
func extractImage(img v1.Image, dir string, progress func(bytes int64)) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	cr := &countingReader{r: rc, step: progressStep, tell: progress}
	if _, err := untar.Extract(cr, dir, untar.Options{Links: true, Owners: true, Modes: true}); err != nil {
		return err
	}
	if progress != nil {
		progress(cr.n)
	}
	return nil
}

// countingReader counts what is read through it and calls tell each time another step bytes
// went by.
type countingReader struct {
	r       io.Reader
	n, next int64
	step    int64
	tell    func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.tell != nil && c.n >= c.next {
		c.next = c.n + c.step
		c.tell(c.n)
	}
	return n, err
}

// removeStale deletes <slug>.old-<unix nanos> directories in dir older than age, and
// temporary directories of installs that were interrupted (older than age too, so that an
// install under way in another process keeps its own).
func removeStale(dir string, age time.Duration) {
	olds, _ := filepath.Glob(filepath.Join(dir, "*.old-*"))
	for _, o := range olds {
		i := strings.LastIndex(o, ".old-")
		ns, err := strconv.ParseInt(o[i+len(".old-"):], 10, 64)
		if err == nil && time.Since(time.Unix(0, ns)) > age {
			os.RemoveAll(o)
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	for _, t := range tmps {
		if fi, err := os.Stat(t); err == nil && time.Since(fi.ModTime()) > age {
			os.RemoveAll(t)
		}
	}
}

// Config returns the runtime configuration (Env, WorkingDir, Cmd, ...) recorded when ref was
// installed; an entry 0.25 left has none (os.ErrNotExist).
func (c *Cache) Config(ref string) (v1.Config, error) {
	p, err := c.Path(ref)
	if err != nil {
		return v1.Config{}, err
	}
	b, err := os.ReadFile(p + ".json")
	if err != nil {
		return v1.Config{}, err
	}
	var m Meta
	err = json.Unmarshal(b, &m)
	return m.Config, err
}
