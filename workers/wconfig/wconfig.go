// Package wconfig reads a product worker's configuration: the YAML (or JSON) file named by
// --config, else by $III_CONFIG (the file Compose writes from the package defaults, the stored
// entry and config_override), over the worker's own defaults. Unknown keys are refused, naming
// the file and the key, so nothing configured is silently ignored.
package wconfig

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

var placeholder = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:([^}]*))?\}`)

// EnvConfig names the configuration file Compose hands a worker.
const EnvConfig = "III_CONFIG"

// Load decodes the file path (or $III_CONFIG when path is "") into dst, which holds the
// defaults. No file at all leaves dst as it is.
func Load(path string, dst any) (string, error) {
	if path == "" {
		path = os.Getenv(EnvConfig)
	}
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return path, fmt.Errorf("reading the configuration %s: %w", path, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return path, nil
	}
	var missing []string
	b = placeholder.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := placeholder.FindSubmatch(m)
		if v, ok := os.LookupEnv(string(sub[1])); ok {
			return []byte(v)
		}
		if len(sub[2]) > 0 {
			return sub[3]
		}
		missing = append(missing, string(sub[1]))
		return m
	})
	if len(missing) > 0 {
		return path, fmt.Errorf("configuration %s: environment variable(s) %s unset and without a default", path, strings.Join(missing, ", "))
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(dst); err != nil {
		return path, fmt.Errorf("configuration %s: %w", path, err)
	}
	return path, nil
}
