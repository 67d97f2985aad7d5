package configuration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// fileEntry is one entry as the fs adapter keeps it: <dir>/<id>.yaml. The schema is not kept;
// its owner registers it again every boot.
type fileEntry struct {
	ID          string `yaml:"id"`
	Name        string `yaml:"name,omitempty"`
	Description string `yaml:"description,omitempty"`
	Value       any    `yaml:"value"`
}

// fsStore persists entries as YAML files in one directory.
type fsStore struct{ dir string }

func (s fsStore) load() (map[string]fileEntry, error) {
	out := map[string]fileEntry{}
	files, err := filepath.Glob(filepath.Join(s.dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var e fileEntry
		if err := yaml.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		if e.ID == "" {
			e.ID = strings.TrimSuffix(filepath.Base(f), ".yaml")
		}
		out[e.ID] = e
	}
	return out, nil
}

func (s fsStore) save(e fileEntry) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	b, err := yaml.Marshal(e)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, "."+e.ID+".yaml.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, e.ID+".yaml"))
}

// toAny turns raw JSON into plain Go values for YAML.
func toAny(raw json.RawMessage) (any, error) {
	var v any
	if len(raw) == 0 {
		return nil, nil
	}
	err := json.Unmarshal(raw, &v)
	return v, err
}
