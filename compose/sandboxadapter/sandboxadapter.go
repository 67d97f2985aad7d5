// Package sandboxadapter names the sandbox adapter Compose installs for projects that need
// sandboxes or VM workers, and the iii-sandbox alias that pins it to the engine's sandbox
// contract major (REFERENCE-compose.md §10).
package sandboxadapter

import "fmt"

const (
	// Name is the adapter's registry package and default container key.
	Name = "sandbox-libkrun"
	// Alias is the name compose::add accepts for the adapter (worker=iii-sandbox).
	Alias = "iii-sandbox"
	// Worker is the worker: value Compose writes for the adapter container.
	Worker = "package://api.workers.iii.dev/" + Name
	// ContractMajor is the sandbox contract major this engine's router speaks.
	ContractMajor = 1
)

// ranges maps a sandbox contract major to the adapter versions implementing it in this release.
var ranges = map[int]string{1: "^0.3"}

// Range returns the adapter version range for a contract major.
func Range(contractMajor int) (string, error) {
	r, ok := ranges[contractMajor]
	if !ok {
		return "", fmt.Errorf("no %s release implements sandbox contract %d", Name, contractMajor)
	}
	return r, nil
}

// CurrentRange is the range the iii-sandbox alias resolves to for this engine (^0.3).
func CurrentRange() string {
	r, _ := Range(ContractMajor)
	return r
}

// Resolve maps the alias to the adapter pinned to the current contract range; any other name is
// returned with an empty range.
func Resolve(name string) (pkg, versionRange string, isAlias bool) {
	if name == Alias {
		return Name, CurrentRange(), true
	}
	return name, "", false
}
