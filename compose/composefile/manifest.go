package composefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/compose/errcode"
	"gopkg.in/yaml.v3"
)

// Manifest is the part of a path:// worker's iii.worker.yaml Compose reads.
type Manifest struct {
	Name    string `yaml:"name"`
	Runtime struct {
		// BaseImage (an OCI reference) makes the worker a VM worker, run by the sandbox adapter.
		BaseImage string `yaml:"base_image"`
	} `yaml:"runtime"`
	Scripts struct {
		Start string `yaml:"start"`
	} `yaml:"scripts"`
}

// ReadManifest reads dir/iii.worker.yaml. A missing directory is MISSING_WORKER_DIRECTORY; a
// missing manifest returns (nil, nil); one that does not parse is INVALID_MANIFEST.
func ReadManifest(dir string) (*Manifest, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, errcode.New(errcode.MissingWorkerDirectory, "worker directory %s does not exist", dir)
	}
	path := filepath.Join(dir, ManifestName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errcode.New(errcode.IOError, "cannot read %s: %w", path, err)
	}
	var m Manifest
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, &errcode.Error{Code: errcode.InvalidManifest, Message: fmt.Sprintf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: ")), Err: err}
	}
	return &m, nil
}

// IsVM reports whether the manifest makes its worker run in a microVM.
func (m *Manifest) IsVM() bool { return m != nil && strings.TrimSpace(m.Runtime.BaseImage) != "" }
