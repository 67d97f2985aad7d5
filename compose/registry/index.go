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
//	  ],
//	  "iii_compat": [                             // optional: iii's version lines a build serves
//	    {"iii": "0.22", "build": "0.1.0"},
//	    {"iii": "0.21", "build": "0.1.0"}
//	  ]
//	}
//
// iii_compat is the registry's compatibility table. This project publishes its workers under its
// own versions (workers/VERSION), while a compose file written for iii pins iii's versions of the
// same worker (state "0.22.2"). Each entry says that the build published here as "build" serves
// every version iii published on the line "iii" (MAJOR.MINOR: 0.22 is 0.22.0, 0.22.1, ...). The
// table is used only when no published version satisfies a pin, and never silently: Select
// reports the line it used, Compose prints the mapping and the lock records both the pin and the
// build. A pin that no published version and no line satisfies is PACKAGE_NOT_RESOLVED naming the
// pin, the published versions and the lines the table serves.
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
	// Compat is the compatibility table (see the package doc), newest line first.
	Compat []CompatLine `json:"iii_compat,omitempty"`
}

// CompatLine is one row of the compatibility table: the build published here that serves every
// version iii published on one of its version lines.
type CompatLine struct {
	// III is iii's version line, MAJOR.MINOR ("0.22").
	III string `json:"iii"`
	// Build is the version of this registry that serves it.
	Build string `json:"build"`
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
// highest release when there is none. When no published version satisfies it, the compatibility
// table is tried (see lineFor); line is then the row used, and nil when a published version
// satisfied the selector directly.
func (ix *Index) Select(selector string) (v *Version, line *CompatLine, err error) {
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
		return nil, nil, errcode.New(errcode.PackageNotResolved, "'%s' is neither a version, a range nor a tag of '%s' (tags: %s)", selector, ix.Name, strings.Join(ix.tagNames(), ", "))
	}
	if best := ix.highest(c); best != nil {
		return best, nil, nil
	}
	msg := fmt.Sprintf("no version of '%s' satisfies '%s' (published: %s)", ix.Name, selector, strings.Join(ix.versionNames(), ", "))
	if len(ix.Compat) == 0 {
		return nil, nil, errcode.New(errcode.PackageNotResolved, "%s", msg)
	}
	line, err = ix.lineFor(sel, c)
	if err != nil {
		return nil, nil, errcode.New(errcode.PackageNotResolved, "%s; %w", msg, err)
	}
	if line == nil {
		return nil, nil, errcode.New(errcode.PackageNotResolved, "%s, and it is on none of iii's version lines the registry's compatibility table serves (%s)", msg, ix.compatNames())
	}
	for i := range ix.Versions {
		if ix.Versions[i].Version == line.Build {
			return &ix.Versions[i], line, nil
		}
	}
	return nil, nil, errcode.New(errcode.PackageNotResolved, "%s; the registry's compatibility table maps iii %s onto build %s, which is not published", msg, line.III, line.Build)
}

// highest is the highest published version c accepts, nil when none.
func (ix *Index) highest(c *semver.Constraints) *Version {
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
	return best
}

// literal finds the versions written in a selector (0.21.3, v1.2, 0.22.0-alpha.1).
var literal = regexp.MustCompile(`v?(\d+)\.(\d+)(?:\.(\d+)(-[0-9A-Za-z.-]+)?)?`)

// lineFor returns the row of the compatibility table whose line holds a version the constraint c
// (the selector sel, parsed) accepts: the newest such line. A line MAJOR.MINOR holds the versions
// MAJOR.MINOR.P; whether c accepts one of them is decided on finitely many candidates, since the
// bounds of a constraint are the versions written in it: MAJOR.MINOR.0 and, for every version
// written in sel on that line, its patch and the patches either side (and the version itself, so
// an exact prerelease pin finds its line). A row whose line is not MAJOR.MINOR is an error naming
// it, as is a build that is not a version.
func (ix *Index) lineFor(sel string, c *semver.Constraints) (*CompatLine, error) {
	var best *CompatLine
	var bestV *semver.Version
	for i := range ix.Compat {
		row := &ix.Compat[i]
		major, minor, ok := parseLine(row.III)
		if !ok {
			return nil, fmt.Errorf("the registry's compatibility table has line %q, which is not MAJOR.MINOR", row.III)
		}
		if !lineAccepts(major, minor, sel, c) {
			continue
		}
		lv := semver.New(major, minor, 0, "", "")
		if bestV == nil || lv.GreaterThan(bestV) {
			best, bestV = row, lv
		}
	}
	return best, nil
}

func parseLine(s string) (major, minor uint64, ok bool) {
	a, b, found := strings.Cut(s, ".")
	if !found {
		return 0, 0, false
	}
	var err1, err2 error
	major, err1 = parseUint(a)
	minor, err2 = parseUint(b)
	return major, minor, err1 == nil && err2 == nil
}

func parseUint(s string) (uint64, error) {
	if s == "" || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	var n uint64
	for _, r := range s {
		n = n*10 + uint64(r-'0')
	}
	return n, nil
}

// lineAccepts reports whether c accepts a version MAJOR.MINOR.P (see lineFor).
func lineAccepts(major, minor uint64, sel string, c *semver.Constraints) bool {
	cands := []*semver.Version{semver.New(major, minor, 0, "", "")}
	for _, m := range literal.FindAllStringSubmatch(sel, -1) {
		ma, err1 := parseUint(m[1])
		mi, err2 := parseUint(m[2])
		if err1 != nil || err2 != nil || ma != major || mi != minor || m[3] == "" {
			continue
		}
		p, err := parseUint(m[3])
		if err != nil {
			continue
		}
		cands = append(cands, semver.New(major, minor, p, "", ""), semver.New(major, minor, p+1, "", ""))
		if p > 0 {
			cands = append(cands, semver.New(major, minor, p-1, "", ""))
		}
		if m[4] != "" {
			cands = append(cands, semver.New(major, minor, p, strings.TrimPrefix(m[4], "-"), ""))
		}
	}
	for _, v := range cands {
		if c.Check(v) {
			return true
		}
	}
	return false
}

// compatNames renders the table for messages: "iii 0.22 → 0.1.0, iii 0.21 → 0.1.0".
func (ix *Index) compatNames() string {
	var out []string
	for _, r := range ix.Compat {
		out = append(out, fmt.Sprintf("iii %s → %s", r.III, r.Build))
	}
	return strings.Join(out, ", ")
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
