// Package image keeps the root filesystem cache of sandbox images: OCI images (pulled from a
// registry with go-containerregistry, or imported from an OCI image layout) flattened into
// <cache>/<slug>/rootfs, where <cache> is ~/.iii/cache and <slug> is derived from the image's
// canonical reference. Beside rootfs/ sit config.json (the image's runtime config), digest and
// ref.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
)

// ErrNoBin marks an image whose root filesystem has no bin/ (usually: no linux/<arch> image).
var ErrNoBin = errors.New("image root filesystem has no bin/ (no linux image for this host's architecture?)")

// RefAnnotation names the reference of an image inside an OCI layout's index.
const RefAnnotation = "org.opencontainers.image.ref.name"

// DefaultDir is the cache directory: $III_CACHE_DIR, else ~/.iii/cache (HOME honoured).
func DefaultDir() string {
	if d := os.Getenv("III_CACHE_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".iii", "cache")
}

// Cache is a rootfs cache directory. It is safe for concurrent use within a process; across
// processes an install is atomic (extract to a temporary directory, then rename).
type Cache struct {
	Dir string
	mu  sync.Mutex
	ref map[string]*sync.Mutex
}

// NewCache returns the cache at dir (DefaultDir when empty).
func NewCache(dir string) *Cache {
	if dir == "" {
		dir = DefaultDir()
	}
	return &Cache{Dir: dir, ref: map[string]*sync.Mutex{}}
}

// Canonical returns the fully qualified form of ref, e.g. "index.docker.io/iiidev/python:latest".
func Canonical(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	return r.Name(), nil
}

// Slug is the cache directory name of ref: its canonical form with every character other than
// letters, digits, '.', '-' and '_' replaced by '_'.
func Slug(ref string) (string, error) {
	c, err := Canonical(ref)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, r := range c {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String(), nil
}

// Path returns <cache>/<slug>/rootfs for ref, whether or not it exists.
func (c *Cache) Path(ref string) (string, error) {
	s, err := Slug(ref)
	if err != nil {
		return "", err
	}
	return filepath.Join(c.Dir, s, "rootfs"), nil
}

// RootFS returns the cached root filesystem of ref and whether it is present.
func (c *Cache) RootFS(ref string) (string, bool) {
	p, err := c.Path(ref)
	if err != nil {
		return "", false
	}
	if _, err := os.Lstat(filepath.Join(p, "bin")); err != nil {
		return p, false
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

// Pull fetches ref for linux/<host arch> from its registry and installs it, unless it is cached.
func (c *Cache) Pull(ctx context.Context, ref string) (string, error) {
	if p, ok := c.RootFS(ref); ok {
		return p, nil
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	return c.Install(ref, img)
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

// Install flattens img into the cache entry of ref, replacing what was there.
func (c *Cache) Install(ref string, img v1.Image) (string, error) {
	defer c.lock(ref)()
	dst, err := c.Path(ref)
	if err != nil {
		return "", err
	}
	entry := filepath.Dir(dst)
	if err := os.MkdirAll(entry, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(entry, ".rootfs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	rc := mutate.Extract(img)
	err = extract(rc, tmp)
	rc.Close()
	if err != nil {
		return "", fmt.Errorf("extract %s: %w", ref, err)
	}
	if _, err := os.Lstat(filepath.Join(tmp, "bin")); err != nil {
		return "", ErrNoBin
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if cf, err := img.ConfigFile(); err == nil {
		if b, err := json.MarshalIndent(cf.Config, "", "  "); err == nil {
			_ = os.WriteFile(filepath.Join(entry, "config.json"), b, 0o644)
		}
	}
	if d, err := img.Digest(); err == nil {
		_ = os.WriteFile(filepath.Join(entry, "digest"), []byte(d.String()+"\n"), 0o644)
	}
	canon, _ := Canonical(ref)
	_ = os.WriteFile(filepath.Join(entry, "ref"), []byte(canon+"\n"), 0o644)
	// The replaced rootfs may still be served to running VMs: it is set aside and removed by a
	// later install once it is old enough that no sandbox can still be using it.
	removeStale(entry, time.Hour)
	_ = os.Rename(dst, dst+fmt.Sprintf(".old-%d", time.Now().UnixNano()))
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// removeStale deletes rootfs.old-<unix nanos> directories in entry older than age.
func removeStale(entry string, age time.Duration) {
	olds, _ := filepath.Glob(filepath.Join(entry, "rootfs.old-*"))
	for _, o := range olds {
		ns, err := strconv.ParseInt(strings.TrimPrefix(filepath.Base(o), "rootfs.old-"), 10, 64)
		if err == nil && time.Since(time.Unix(0, ns)) > age {
			os.RemoveAll(o)
		}
	}
}

// Config returns the runtime configuration (Env, WorkingDir, Cmd, ...) recorded when ref was
// installed.
func (c *Cache) Config(ref string) (v1.Config, error) {
	var cfg v1.Config
	p, err := c.Path(ref)
	if err != nil {
		return cfg, err
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(p), "config.json"))
	if err != nil {
		return cfg, err
	}
	err = json.Unmarshal(b, &cfg)
	return cfg, err
}
