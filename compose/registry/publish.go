package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/iii-go/iii/compose/state"
)

// Package is one version of a worker to publish.
type Package struct {
	Name    string
	Version string
	// Type is TypeBinary, TypeBundle or TypeEngine.
	Type string
	// Artifacts maps a target triple (or BundleKey) to a local file: a .tar.gz is published as
	// is; any other file is a binary packed into a .tar.gz under the package's name (.exe on
	// Windows targets). Engine packages have none.
	Artifacts map[string]string
	// Targets lists the supported targets; default: the artifact keys, sorted.
	Targets      []string
	Config       map[string]any
	Dependencies map[string]string
	// Tags point at this version; with none, "latest" moves to the highest release.
	Tags []string
	// IIILines are iii's version lines (MAJOR.MINOR) of this worker that this version serves:
	// they go into the index's compatibility table (iii_compat), each line pointing at the
	// highest version published for it.
	IIILines []string
}

// Publish writes p into the registry tree rooted at root: its artifacts under
// workers/<name>/<version>/ and an updated workers/<name>/index.json (relative artifact URLs,
// versions newest first). Publishing a version again replaces it.
func Publish(root string, p Package) error {
	if err := CheckName("package name", p.Name); err != nil {
		return err
	}
	if _, err := semver.StrictNewVersion(p.Version); err != nil {
		return fmt.Errorf("publish %s: version %q is not semver: %w", p.Name, p.Version, err)
	}
	switch p.Type {
	case TypeBinary, TypeBundle, TypeEngine:
	default:
		return fmt.Errorf("publish %s %s: unknown type %q", p.Name, p.Version, p.Type)
	}
	pkgDir := filepath.Join(root, "workers", p.Name)
	verDir := filepath.Join(pkgDir, p.Version)
	if err := os.MkdirAll(verDir, 0o755); err != nil {
		return err
	}
	v := Version{Version: p.Version, Type: p.Type, Config: p.Config, Dependencies: p.Dependencies,
		Artifacts: map[string]Artifact{}, Targets: p.Targets}
	keys := slices.Sorted(maps.Keys(p.Artifacts))
	for _, t := range keys {
		data, err := artifactBytes(p.Name, t, p.Artifacts[t])
		if err != nil {
			return fmt.Errorf("publish %s %s for %s: %w", p.Name, p.Version, t, err)
		}
		file := p.Name + "-" + t + ".tar.gz"
		if err := state.WriteFileAtomic(filepath.Join(verDir, file), data, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		v.Artifacts[t] = Artifact{URL: p.Version + "/" + file, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
	}
	if len(v.Targets) == 0 && p.Type == TypeBinary {
		v.Targets = keys
	}
	if len(v.Artifacts) == 0 {
		v.Artifacts = nil
	}
	ix := Index{Name: p.Name}
	indexPath := filepath.Join(pkgDir, "index.json")
	if b, err := os.ReadFile(indexPath); err == nil {
		if err := json.Unmarshal(b, &ix); err != nil {
			return fmt.Errorf("%s: %w", indexPath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	kept := ix.Versions[:0]
	for _, old := range ix.Versions {
		if old.Version != p.Version {
			kept = append(kept, old)
		}
	}
	ix.Versions = append(kept, v)
	sortVersions(ix.Versions)
	if err := mergeCompat(&ix, p); err != nil {
		return err
	}
	if ix.Tags == nil {
		ix.Tags = map[string]string{}
	}
	for _, t := range p.Tags {
		ix.Tags[t] = p.Version
	}
	if len(p.Tags) == 0 {
		if latest := highestRelease(ix.Versions); latest != "" {
			ix.Tags["latest"] = latest
		}
	}
	out, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return err
	}
	return state.WriteFileAtomic(indexPath, append(out, '\n'), 0o644)
}

// mergeCompat points each of p's iii lines at p's version, unless a higher version already
// serves that line, and keeps the table newest line first.
func mergeCompat(ix *Index, p Package) error {
	pv := semver.MustParse(p.Version)
	for _, l := range p.IIILines {
		if _, _, ok := parseLine(l); !ok {
			return fmt.Errorf("publish %s %s: iii line %q is not MAJOR.MINOR", p.Name, p.Version, l)
		}
		i := slices.IndexFunc(ix.Compat, func(r CompatLine) bool { return r.III == l })
		if i < 0 {
			ix.Compat = append(ix.Compat, CompatLine{III: l, Build: p.Version})
			continue
		}
		if old, err := semver.NewVersion(ix.Compat[i].Build); err != nil || !old.GreaterThan(pv) {
			ix.Compat[i].Build = p.Version
		}
	}
	sort.SliceStable(ix.Compat, func(i, j int) bool {
		ai, aj, _ := parseLine(ix.Compat[i].III)
		bi, bj, _ := parseLine(ix.Compat[j].III)
		return ai > bi || (ai == bi && aj > bj)
	})
	return nil
}

func highestRelease(vs []Version) string {
	for _, v := range vs {
		if sv, err := semver.NewVersion(v.Version); err == nil && sv.Prerelease() == "" {
			return v.Version
		}
	}
	return ""
}

// artifactBytes returns a .tar.gz as is, or packs a binary into a reproducible .tar.gz.
func artifactBytes(name, target, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, ".tar.gz") || strings.HasSuffix(path, ".tgz") {
		return data, nil
	}
	exe := name
	if strings.Contains(target, "windows") {
		exe += ".exe"
	}
	return TarGz(map[string][]byte{exe: data})
}

// TarGz packs files (name → content, mode 0755) into a reproducible .tar.gz: sorted entries,
// zero times and owners.
func TarGz(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	names := slices.Sorted(maps.Keys(files))
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(files[n])), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
