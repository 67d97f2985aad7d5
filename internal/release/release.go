package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Asset is one archive of a release, as listed in manifest.json.
type Asset struct {
	Name    string `json:"asset"`
	Product string `json:"product"`
	Version string `json:"version"`
	Target  string `json:"target"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
}

// Manifest is manifest.json: the release's version and every asset in it, sorted by name.
type Manifest struct {
	Version string  `json:"version"`
	Assets  []Asset `json:"assets"`
}

// Options configures Run.
type Options struct {
	Root     string            // repository root
	Dist     string            // output root; assets go to <Dist>/iii/v<version>/
	Jobs     int               // parallel builds (default 2)
	Targets  []Target          // default: every target of the table
	Versions map[string]string // product → version; default: read from each VersionFile
	Log      io.Writer         // one progress line per built asset
	Extra    []string          // files (relative to Root) published as they are, e.g. updater/install.sh
	// Firmware maps a target triple to the VM firmware directory its adapter archive carries
	// (built by mage's Firmware target); a target without one ships the adapter alone.
	Firmware map[string]string
}

// ReadVersion returns a product's version from its VERSION file.
func ReadVersion(root string, p Product) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, p.VersionFile))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// ReadDefaultConfig returns the configuration published with p's worker package (its
// DefaultConfig file under root), or nil when p has none.
func ReadDefaultConfig(root string, p Product) (map[string]any, error) {
	if p.DefaultConfig == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(root, p.DefaultConfig))
	if err != nil {
		return nil, err
	}
	var config map[string]any
	if err := json.Unmarshal(b, &config); err != nil {
		return nil, fmt.Errorf("%s: %w", p.DefaultConfig, err)
	}
	return config, nil
}

// Dir is the directory that holds the assets of iii version v under dist.
func Dir(dist, v string) string { return filepath.Join(dist, "iii", "v"+v) }

// Run cross-compiles every product for every target that ships it, packages the archives and
// writes the sidecars, checksums.txt, manifest.json and the channel pointer <Dist>/iii/latest.
func Run(ctx context.Context, o Options) (*Manifest, error) {
	if o.Jobs <= 0 {
		o.Jobs = 2
	}
	if o.Targets == nil {
		o.Targets = Targets
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	versions, err := resolveVersions(o)
	if err != nil {
		return nil, err
	}
	out := Dir(o.Dist, versions["iii"])
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	assets, err := buildAll(ctx, o, out, versions)
	if err != nil {
		return nil, err
	}
	for _, rel := range o.Extra {
		a, err := PublishFile(out, versions["iii"], filepath.Join(o.Root, rel))
		if err != nil {
			return nil, err
		}
		assets = append(assets, a)
	}
	m, err := WriteIndex(out, versions["iii"], assets)
	if err != nil {
		return nil, err
	}
	return m, writeAtomicBytes(filepath.Join(o.Dist, "iii", "latest"), []byte(versions["iii"]+"\n"))
}

// resolveVersions returns the version of every product: the override in o.Versions, else the
// one read from the source tree.
func resolveVersions(o Options) (map[string]string, error) {
	versions := map[string]string{}
	for _, p := range Products {
		v := o.Versions[p.Name]
		if v == "" {
			var err error
			if v, err = ReadVersion(o.Root, p); err != nil {
				return nil, err
			}
		}
		versions[p.Name] = v
	}
	return versions, nil
}

// buildAll builds the asset of every product for every target that ships it into out, at most
// o.Jobs at a time, logging one progress line per asset; it returns the first failure.
func buildAll(ctx context.Context, o Options, out string, versions map[string]string) ([]Asset, error) {
	type job struct {
		p Product
		t Target
	}
	var jobs []job
	for _, t := range o.Targets {
		for _, p := range Products {
			if t.Ships(p.Name) {
				jobs = append(jobs, job{p, t})
			}
		}
	}
	var (
		mu     sync.Mutex
		assets []Asset
		errs   []error
		done   int
		wg     sync.WaitGroup
		sem    = make(chan struct{}, o.Jobs)
	)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var fw string
			if j.p.Firmware {
				fw = o.Firmware[j.t.Triple]
			}
			a, err := buildAsset(ctx, o.Root, out, j.p, j.t, versions[j.p.Name], fw)
			mu.Lock()
			defer mu.Unlock()
			done++
			if err != nil {
				errs = append(errs, err)
				fmt.Fprintf(o.Log, "[%d/%d] FAILED %s %s: %v\n", done, len(jobs), j.p.Name, j.t.Triple, err)
				return
			}
			assets = append(assets, a)
			fmt.Fprintf(o.Log, "[%d/%d] %-16s %-28s %s %.1f MB\n", done, len(jobs), j.p.Name, j.t.Triple, versions[j.p.Name], float64(a.Size)/1e6)
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return assets, nil
}

// BuildBinary cross-compiles product p for target t with the version injected, CGO off.
func BuildBinary(ctx context.Context, root string, p Product, t Target, version, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, p.Package)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+t.GOOS, "GOARCH="+t.GOARCH, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", p.Name, t.Triple, err, stderr.String())
	}
	return nil
}

// PackageBinary archives the binary at bin, plus extra files, as product's asset for t into dir
// and writes its <asset>.sha256 sidecar.
func PackageBinary(dir, product, version string, t Target, bin string, extra ...File) (Asset, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return Asset{}, err
	}
	name := t.AssetName(product)
	path := filepath.Join(dir, name)
	files := append([]File{{Name: t.Exe(product), Mode: 0o755, Data: data}}, extra...)
	if err := WriteArchive(path, t.Archive, files); err != nil {
		return Asset{}, err
	}
	sum, size, err := SHA256File(path)
	if err != nil {
		return Asset{}, err
	}
	if err := writeAtomicBytes(path+".sha256", []byte(ChecksumLine(sum, name))); err != nil {
		return Asset{}, err
	}
	return Asset{Name: name, Product: product, Version: version, Target: t.Triple, SHA256: sum, Size: size}, nil
}

// PublishFile copies the file at src into dir under its own name, unchanged, writes its
// <name>.sha256 sidecar and returns its entry for WriteIndex (product = file name, no target).
func PublishFile(dir, version, src string) (Asset, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return Asset{}, err
	}
	name := filepath.Base(src)
	path := filepath.Join(dir, name)
	if err := writeAtomicBytes(path, data); err != nil {
		return Asset{}, err
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	if err := writeAtomicBytes(path+".sha256", []byte(ChecksumLine(hexSum, name))); err != nil {
		return Asset{}, err
	}
	return Asset{Name: name, Product: name, Version: version, SHA256: hexSum, Size: int64(len(data))}, nil
}

// FirmwareDir is the directory beside the adapter binary, in its archive, that holds the VM
// firmware it carries.
const FirmwareDir = "firmware"

// FirmwareFiles returns the regular files of the firmware directory dir as archive entries
// under firmware/.
func FirmwareFiles(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("VM firmware: %w (build it with `go tool mage firmware`)", err)
	}
	var files []File
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: FirmwareDir + "/" + e.Name(), Mode: 0o644, Data: data})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("VM firmware: %s is empty (build it with `go tool mage firmware`)", dir)
	}
	return files, nil
}

func buildAsset(ctx context.Context, root, out string, p Product, t Target, version, firmware string) (Asset, error) {
	tmp, err := os.MkdirTemp("", "iii-release-")
	if err != nil {
		return Asset{}, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, t.Exe(p.Name))
	if err := BuildBinary(ctx, root, p, t, version, bin); err != nil {
		return Asset{}, err
	}
	var extra []File
	if firmware != "" {
		if extra, err = FirmwareFiles(firmware); err != nil {
			return Asset{}, err
		}
	}
	return PackageBinary(out, p.Name, version, t, bin, extra...)
}

// WriteIndex writes checksums.txt (every asset, sorted by name) and manifest.json into dir.
// Files other than archives (an install script, say) may be listed by passing them as assets.
func WriteIndex(dir, version string, assets []Asset) (*Manifest, error) {
	sorted := append([]Asset(nil), assets...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var sums strings.Builder
	for _, a := range sorted {
		sums.WriteString(ChecksumLine(a.SHA256, a.Name))
	}
	if err := writeAtomicBytes(filepath.Join(dir, "checksums.txt"), []byte(sums.String())); err != nil {
		return nil, err
	}
	m := &Manifest{Version: version, Assets: sorted}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return m, writeAtomicBytes(filepath.Join(dir, "manifest.json"), append(data, '\n'))
}

func writeAtomicBytes(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
