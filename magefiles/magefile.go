//go:build mage

// Build, release, test and lint iii. Run `go tool mage -l` for the list of targets; they live in
// the ordinary package internal/magetargets, which go vet and go test see.
package main

import (
	// mage:import
	_ "github.com/iii-go/iii/internal/magetargets"
)
