// Package wconfig reads a product worker's configuration: the YAML (or JSON) file named by
// --config, else by $III_CONFIG (the file Compose writes from the package defaults, the stored
// entry and config_override), over the worker's own defaults, with ${VAR} and ${VAR:default}
// expanded in its values (package interpolate). Unknown keys are refused, naming the file and
// the key, so nothing configured is silently ignored.
package wconfig

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/iii-go/iii/internal/base/interpolate"
)

// EnvConfig names the configuration file Compose hands a worker.
const EnvConfig = "III_CONFIG"

// Load decodes the file path (or $III_CONFIG when path is "") into dst, which holds the
// defaults, with the variables of lookupEnv (os.LookupEnv in the binary). No file at all leaves
// dst as it is.
func Load(path string, dst any, lookupEnv func(string) (string, bool)) (string, error) {
	if path == "" {
		path, _ = lookupEnv(EnvConfig)
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
	missing, err := interpolate.Decode(b, lookupEnv, dst)
	if err != nil {
		return path, fmt.Errorf("configuration %s: %w", path, err)
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = fmt.Sprintf("%s (line %d)", m.Name, m.Line)
		}
		return path, fmt.Errorf("configuration %s: environment variable(s) %s unset and without a default", path, strings.Join(names, ", "))
	}
	return path, nil
}
