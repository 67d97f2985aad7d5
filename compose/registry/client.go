package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/internal/base/fetch"
)

const (
	// EnvURL names the default registry (file://DIR, http(s)://HOST/PATH or a directory).
	EnvURL = "III_REGISTRY_URL"
	// DefaultHost is the public registry; package://NAME and package://DefaultHost/NAME use it.
	DefaultHost = "api.workers.iii.dev"
)

// fetchTimeout bounds one fetch from a registry, the artifact's download included.
const fetchTimeout = 5 * time.Minute

// maxIndexSize bounds a package's index.json.
const maxIndexSize = 16 << 20

// Client reads one registry. Every file is read through internal/base/fetch: regular files only over
// file://, no redirect from https to plain http.
type Client struct {
	base *url.URL
}

// New returns a client for the registry rooted at raw: a file:// or http(s):// URL, or a
// directory path.
func New(raw string) (*Client, error) {
	u, err := parseRoot(raw)
	if err != nil {
		return nil, err
	}
	return &Client{base: u}, nil
}

func parseRoot(raw string) (*url.URL, error) {
	if !strings.Contains(raw, "://") {
		abs, err := filepath.Abs(raw)
		if err != nil {
			return nil, err
		}
		return &url.URL{Scheme: "file", Path: filepath.ToSlash(abs) + "/"}, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "file" && u.Scheme != "http" && u.Scheme != "https") {
		return nil, errcode.New(errcode.RegistryUnreachable, "registry %q is not a file://, http:// or https:// URL", raw)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// ForHost returns the client for a package://HOST/NAME reference: the default registry
// (defaultURL, $III_REGISTRY_URL, else https://api.workers.iii.dev) for an empty host or
// DefaultHost, and https://HOST otherwise.
func ForHost(host, defaultURL string) (*Client, error) {
	if host == "" || host == DefaultHost {
		if defaultURL != "" {
			return New(defaultURL)
		}
		return New("https://" + DefaultHost)
	}
	return New("https://" + host)
}

// URL is the registry's root.
func (c *Client) URL() string { return c.base.String() }

// open fetches u under opts and fetchTimeout; a file:// path that is not a regular file is
// ARTIFACT_URL_REFUSED.
func (c *Client) open(ctx context.Context, u *url.URL, opts ...fetch.Option) (*fetch.File, error) {
	f, err := fetch.Open(ctx, u.String(), append([]fetch.Option{fetch.Timeout(fetchTimeout)}, opts...)...)
	if errors.Is(err, fetch.ErrNotRegular) {
		return nil, errcode.New(errcode.ArtifactURLRefused, "%s is not a regular file", u)
	}
	return f, err
}

// Index fetches workers/<name>/index.json.
func (c *Client) Index(ctx context.Context, name string) (*Index, error) {
	if err := CheckName("package name", name); err != nil {
		return nil, err
	}
	u := c.base.ResolveReference(&url.URL{Path: "workers/" + name + "/index.json"})
	f, err := c.open(ctx, u, fetch.MaxSize(maxIndexSize))
	if errors.Is(err, fetch.ErrNotFound) {
		if c.base.Scheme == "file" {
			if _, serr := os.Stat(filepath.FromSlash(c.base.Path)); serr != nil {
				return nil, errcode.New(errcode.RegistryUnreachable, "registry %s is unreachable: %w", c.URL(), serr)
			}
		}
		return nil, errcode.New(errcode.PackageNotResolved, "the registry %s has no package '%s'", c.URL(), name)
	}
	var se *fetch.StatusError
	if errors.As(err, &se) {
		return nil, errcode.New(errcode.PackageNotResolved, "the registry %s refused '%s': %w", c.URL(), name, err)
	}
	if err != nil {
		return nil, errcode.New(errcode.RegistryUnreachable, "registry %s is unreachable: %w", c.URL(), err)
	}
	defer f.Close()
	var ix Index
	if err := json.NewDecoder(f).Decode(&ix); err != nil {
		return nil, errcode.New(errcode.PackageNotResolved, "%s is not a valid registry index: %w", u, err)
	}
	if ix.Name == "" {
		ix.Name = name
	}
	for i := range ix.Versions {
		v := &ix.Versions[i]
		for t, a := range v.Artifacts {
			ref, err := url.Parse(a.URL)
			if err != nil {
				return nil, errcode.New(errcode.PackageNotResolved, "%s: %s %s: bad artifact URL %q", u, name, v.Version, a.URL)
			}
			abs := u.ResolveReference(ref)
			if !c.owns(abs) {
				return nil, c.refuse(fmt.Sprintf("%s: %s %s", u, name, v.Version), abs)
			}
			a.URL = abs.String()
			v.Artifacts[t] = a
		}
	}
	return &ix, nil
}

// Resolve fetches name's index and selects the version for selector (see Index.Select); line is
// the row of the compatibility table that mapped selector onto it, nil when none did.
func (c *Client) Resolve(ctx context.Context, name, selector string) (v *Version, line *CompatLine, err error) {
	ix, err := c.Index(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	v, line, err = ix.Select(selector)
	if err != nil {
		return nil, nil, err
	}
	if err := CheckName("version", v.Version); err != nil {
		return nil, nil, err
	}
	return v, line, nil
}

// Fetch opens an absolute artifact URL of this registry under opts (a size limit, a digest); a
// URL the registry does not own (see owns) is ARTIFACT_URL_REFUSED, whether it came from an
// index or from a lock.
func (c *Client) Fetch(ctx context.Context, rawURL string, opts ...fetch.Option) (*fetch.File, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if !c.owns(u) {
		return nil, c.refuse("artifact", u)
	}
	return c.open(ctx, u, opts...)
}

// owns reports whether u is served by this registry: the same scheme and host (with port) as
// its root and, for a file:// registry, a path inside its directory. An index cannot point
// Compose at another server, a local file or a device.
func (c *Client) owns(u *url.URL) bool {
	if !strings.EqualFold(u.Scheme, c.base.Scheme) || !strings.EqualFold(u.Host, c.base.Host) || u.Opaque != "" || u.User != nil {
		return false
	}
	if c.base.Scheme != "file" {
		return true
	}
	root := strings.TrimSuffix(path.Clean(c.base.Path), "/") + "/"
	return strings.HasPrefix(path.Clean(u.Path), root)
}

func (c *Client) refuse(what string, u *url.URL) error {
	return errcode.New(errcode.ArtifactURLRefused, "%s: artifact URL %s is outside the registry %s; Compose downloads artifacts only from the registry's own scheme and host", what, u.Redacted(), c.URL())
}
