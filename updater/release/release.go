// Package release reads an iii release tree: the channel pointer <base>/iii/latest, and per
// version <base>/iii/v<version>/ with manifest.json, the asset archives and their <asset>.sha256
// sidecars. The base is a file:// or http(s):// URL, read through internal/base/fetch (regular files
// only, no redirect from https to http). Every asset is checked against its digest before it is
// returned.
package release

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/iii-go/iii/internal/base/fetch"
	"github.com/iii-go/iii/updater/errcode"
)

// URLEnv names the variable that points at the release tree.
const URLEnv = "III_RELEASE_URL"

// DefaultURL is the release tree used when URLEnv is unset.
const DefaultURL = "https://github.com/iii-go/iii/releases/download"

// maxDownload bounds any one file read from the tree.
const maxDownload = 1 << 30

// fetchTimeout bounds the fetch of any one file of the tree, its body included.
const fetchTimeout = 60 * time.Second

// Asset is one entry of a release's manifest.json.
type Asset struct {
	Name    string `json:"asset"`
	Product string `json:"product"`
	Version string `json:"version"`
	Target  string `json:"target"`
	SHA256  string `json:"sha256"`
}

// Manifest is a release's manifest.json.
type Manifest struct {
	Version string  `json:"version"`
	Assets  []Asset `json:"assets"`
}

// Find returns the asset of product built for target.
func (m *Manifest) Find(product, target string) (Asset, bool) {
	for _, a := range m.Assets {
		if a.Product == product && a.Target == target {
			return a, true
		}
	}
	return Asset{}, false
}

// AssetNotFoundError says a release has no asset of Binary for Target. Its text is the one 0.25
// printed, so it carries no code.
type AssetNotFoundError struct {
	Target, Binary string
}

func (e *AssetNotFoundError) Error() string {
	return fmt.Sprintf("Release asset not found for platform %s: %s", e.Target, e.Binary)
}

// Source is a release tree.
type Source struct {
	Base string // file:// or http(s):// URL of the tree, without the trailing /
}

// From returns the tree at base ($III_RELEASE_URL), or DefaultURL when base is "".
func From(base string) *Source {
	if base == "" {
		base = DefaultURL
	}
	return &Source{Base: strings.TrimRight(base, "/")}
}

// TagDir is the URL of the directory of a version: <base>/iii/v<version>.
func (s *Source) TagDir(version string) string { return s.Base + "/iii/v" + version }

// NormalizeVersion turns "iii/v0.25.0", "v0.25.0" or "0.25.0" into "0.25.0" and checks it is
// a semantic version.
func NormalizeVersion(v string) (string, error) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "iii/")
	v = strings.TrimPrefix(v, "v")
	if _, err := semver.StrictNewVersion(v); err != nil {
		return "", errcode.New(errcode.ReleaseNotFound, "%q is not a version such as 0.26.0 or iii/v0.26.0", v)
	}
	return v, nil
}

// Resolve returns the version that want names: "" or "latest" reads the channel pointer,
// anything else is an exact version (0.25.0, v0.25.0, iii/v0.25.0) that must exist in the tree.
func (s *Source) Resolve(ctx context.Context, want string) (string, error) {
	if want == "" || want == "latest" {
		b, err := s.get(ctx, s.Base+"/iii/latest")
		if err != nil {
			return "", s.wrap(err, errcode.ReleaseNotFound, "cannot read the latest iii version")
		}
		v, err := NormalizeVersion(string(b))
		if err != nil {
			return "", errcode.New(errcode.ReleaseNotFound, "%s/iii/latest does not hold a version: %w", s.Base, err)
		}
		return v, nil
	}
	v, err := NormalizeVersion(want)
	if err != nil {
		return "", err
	}
	if _, err := s.Manifest(ctx, v); err != nil {
		return "", err
	}
	return v, nil
}

// Manifest reads the manifest.json of a version.
func (s *Source) Manifest(ctx context.Context, version string) (*Manifest, error) {
	b, err := s.get(ctx, s.TagDir(version)+"/manifest.json")
	if err != nil {
		return nil, s.wrap(err, errcode.ReleaseNotFound, "no release iii/v"+version)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errcode.New(errcode.ReleaseNotFound, "%s/manifest.json: %w", s.TagDir(version), err)
	}
	return &m, nil
}

// Fetch downloads asset a of the given version and checks it against the digest of its .sha256
// sidecar and of the manifest; on a mismatch nothing is returned.
func (s *Source) Fetch(ctx context.Context, version string, a Asset) ([]byte, error) {
	dir := s.TagDir(version)
	side, err := s.get(ctx, dir+"/"+a.Name+".sha256")
	if err != nil {
		return nil, s.wrap(err, errcode.DownloadFailed, "cannot read the checksum of "+a.Name)
	}
	want, err := ParseChecksum(string(side), a.Name)
	if err != nil {
		return nil, err
	}
	if a.SHA256 != "" && !strings.EqualFold(a.SHA256, want) {
		return nil, errcode.New(errcode.ChecksumMismatch,
			"%s: manifest.json says sha256 %s but %s.sha256 says %s", a.Name, a.SHA256, a.Name, want)
	}
	data, err := s.get(ctx, dir+"/"+a.Name, fetch.SHA256(want))
	var bad *fetch.DigestError
	if errors.As(err, &bad) {
		return nil, errcode.New(errcode.ChecksumMismatch,
			"%s: sha256 is %s but the release publishes %s; the download is corrupt or was tampered with", a.Name, bad.Got, want)
	}
	if err != nil {
		return nil, s.wrap(err, errcode.DownloadFailed, "cannot download "+a.Name)
	}
	return data, nil
}

// ParseChecksum reads a sha256sum-style line ("<hex>  <name>") or a bare digest and returns
// the digest.
func ParseChecksum(text, name string) (string, error) {
	fields := strings.Fields(text)
	if len(fields) == 0 || len(fields[0]) != 64 {
		return "", errcode.New(errcode.ChecksumMismatch, "%s.sha256 holds no SHA-256 digest", name)
	}
	if _, err := hex.DecodeString(fields[0]); err != nil {
		return "", errcode.New(errcode.ChecksumMismatch, "%s.sha256 holds no SHA-256 digest", name)
	}
	if len(fields) > 1 && strings.TrimPrefix(fields[1], "*") != name {
		return "", errcode.New(errcode.ChecksumMismatch, "%s.sha256 is the checksum of %s", name, fields[1])
	}
	return strings.ToLower(fields[0]), nil
}

// wrap gives err a code and a context, keeping "not found" distinct from other failures.
func (s *Source) wrap(err error, code, what string) error {
	if errors.Is(err, fetch.ErrNotFound) {
		return errcode.New(code, "%s: not found in the release tree %s", what, s.Base)
	}
	return errcode.New(code, "%s: %w", what, err)
}

// get reads one file of the tree, at most maxDownload bytes within fetchTimeout, under the
// further options opts.
func (s *Source) get(ctx context.Context, raw string, opts ...fetch.Option) ([]byte, error) {
	return fetch.ReadAll(ctx, raw, append([]fetch.Option{fetch.MaxSize(maxDownload), fetch.Timeout(fetchTimeout)}, opts...)...)
}
