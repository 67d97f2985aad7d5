package main

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// version overrides VERSION when set at build time with -ldflags "-X main.version=..."; every
// other build (`go build .`, `go install`) reports the embedded VERSION file (req I2).
var version string

// currentVersion is the version iii reports and compares releases against.
func currentVersion() string {
	if version != "" {
		return version
	}
	return strings.TrimSpace(versionFile)
}
