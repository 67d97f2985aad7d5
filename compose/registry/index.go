// Package registry is Compose's client for a worker registry: a tree of static files reachable
// as file:// or http(s):// ($III_REGISTRY_URL), where workers/<name>/index.json lists a
// package's versions. It resolves versions, ranges and tags with Masterminds/semver, downloads
// artifacts into the package cache with their SHA-256 checked, and publishes built artifacts
// into a registry tree (the release and the e2e suite use Publish).
//
// index.json:
//
//	{
//	  "name": "sandbox-libkrun",
//	  "tags": {"latest": "0.3.1", "next": "0.3.1"},
//	  "versions": [
//	    {
//	      "version": "0.3.1",
//	      "type": "binary",                       // binary | bundle | engine
//	      "targets": ["x86_64-unknown-linux-gnu", ...],
//	      "artifacts": {                          // by target triple; "bundle" for bundles
//	        "x86_64-unknown-linux-gnu": {"url": "0.3.1/sandbox-libkrun-x86_64-unknown-linux-gnu.tar.gz",
//	                                     "sha256": "<64 hex>", "size": 123}
//	      },
//	      "config": {"auto_install": true, ...},  // the package's default configuration
//	      "dependencies": {"configuration": "latest"}
//	    }
//	  ]
//	}
//
// Artifact URLs may be relative to index.json; an absolute one must have the registry's own scheme
// and host (for a file:// registry: lie inside its directory), else ARTIFACT_URL_REFUSED. A
// download stops at the artifact's size and at MaxArtifactSize, unpacking at MaxUnpackedSize and
// MaxUnpackedFiles. Every artifact is a .tar.gz: a binary package's
// archive holds the executable named after the package at its root; a bundle's holds its
// iii.worker.yaml at its root. Versions are sorted newest first.
package registry

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/iii-go/iii/compose/errcode"
)

// Package types.
const (
	TypeBinary = "binary"
	TypeBundle = "bundle"
	TypeEngine = "engine"
)

// BundleKey is the artifacts key of a bundle, which serves every target.
const BundleKey = "bundle"

// Index is a package's index.json.
type Index struct {
	Name     string            `json:"name"`
	Tags     map[string]string `json:"tags,omitempty"`
	Versions []Version         `json:"versions"`
}

// Version is one published version of a package.
type Version struct {
	Version      string              `json:"version"`
	Type         string              `json:"type"`
	Targets      []string            `json:"targets,omitempty"`
	Artifacts    map[string]Artifact `json:"artifacts,omitempty"`
	Config       map[string]any      `json:"config,omitempty"`
	Dependencies map[string]string   `json:"dependencies,omitempty"`
}

// Artifact is one downloadable archive.
type Artifact struct {
	URL    string `json:"url"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size,omitempty"`
}

// Shipped lists the targets a version has artifacts for, in its Targets order.
func (v *Version) Shipped() []string {
	if len(v.Targets) > 0 {
		return v.Targets
	}
	return slices.Sorted(maps.Keys(v.Artifacts))
}

var safeName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// CheckName refuses a package name or version that is not safe as a path segment.
func CheckName(kind, s string) error {
	if !safeName.MatchString(s) || strings.Contains(s, "..") {
		return errcode.New(errcode.RegistryNameRefused, "%s %q is not a safe registry name (lowercase letters, digits, ., _ and -)", kind, s)
	}
	return nil
}

// Select returns the version that selector picks: a tag (latest, next, ...), an exact version,
// or a semver range (^0.3, ~1.2, >=1 <2). An empty selector or "*" means the latest tag, or the
// highest release when there is none.
func (ix *Index) Select(selector string) (*Version, error) {
	sel := strings.TrimSpace(selector)
	if sel == "" || sel == "*" {
		if t, ok := ix.Tags["latest"]; ok {
			sel = t
		} else {
			sel = "*"
		}
	} else if t, ok := ix.Tags[sel]; ok {
		sel = t
	}
	c, err := semver.NewConstraint(sel)
	if err != nil {
		return nil, errcode.New(errcode.PackageNotResolved, "'%s' is neither a version, a range nor a tag of '%s' (tags: %s)", selector, ix.Name, strings.Join(ix.tagNames(), ", "))
	}
	var best *Version
	var bestV *semver.Version
	for i := range ix.Versions {
		v, err := semver.NewVersion(ix.Versions[i].Version)
		if err != nil || !c.Check(v) {
			continue
		}
		if bestV == nil || v.GreaterThan(bestV) {
			best, bestV = &ix.Versions[i], v
		}
	}
	if best == nil {
		return nil, errcode.New(errcode.PackageNotResolved, "no version of '%s' satisfies '%s' (published: %s)", ix.Name, selector, strings.Join(ix.versionNames(), ", "))
	}
	return best, nil
}

func (ix *Index) tagNames() []string {
	out := slices.Sorted(maps.Keys(ix.Tags))
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

func (ix *Index) versionNames() []string {
	var out []string
	for _, v := range ix.Versions {
		out = append(out, v.Version)
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// sortVersions orders versions newest first; unparsable ones go last in name order.
func sortVersions(vs []Version) {
	sort.SliceStable(vs, func(i, j int) bool {
		a, ea := semver.NewVersion(vs[i].Version)
		b, eb := semver.NewVersion(vs[j].Version)
		switch {
		case ea != nil && eb != nil:
			return vs[i].Version < vs[j].Version
		case ea != nil:
			return false
		case eb != nil:
			return true
		}
		return a.GreaterThan(b)
	})
}

// String renders a version for messages: "name version (type)".
func (v *Version) String() string { return fmt.Sprintf("%s (%s)", v.Version, v.Type) }
