package main

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// version is the adapter's version: -ldflags "-X main.version=..." may set it at build time;
// every other build (`go build`, `go install`) takes the embedded VERSION file.
var version string

func init() {
	if version == "" {
		version = strings.TrimSpace(versionFile)
	}
}
