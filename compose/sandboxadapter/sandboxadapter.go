// Package sandboxadapter names the sandbox adapter Compose installs for projects that need
// sandboxes or VM workers, and the iii-sandbox alias that pins it to the engine's sandbox
// contract major (req E5).
package sandboxadapter

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/Masterminds/semver/v3"
	"github.com/iii-go/iii/engine/sandbox/scode"
)

const (
	// Name is the adapter's registry package and default container key.
	Name = scode.AdapterName
	// Alias is the name compose::add accepts for the adapter (worker=iii-sandbox).
	Alias = "iii-sandbox"
	// Worker is the worker: value Compose writes for the adapter container.
	Worker = "package://api.workers.iii.dev/" + Name
	// ContractMajor is the sandbox contract major this engine's router speaks.
	ContractMajor = scode.ContractMajor
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

// firstSafe is the first adapter release that keeps the project token out of VM mounts (req B10).
var firstSafe = semver.MustParse("0.3.1")

// patchOf finds the patch numbers a range names for the current contract's minor line.
var patchOf = regexp.MustCompile(`\b0\.3\.(\d+)`)

// AdmitsCurrent reports whether the version range r already admits an adapter release of the
// current contract range at or after 0.3.1 (such as '~0.3.0', '>=0.3.1' or '^0.3'): a bare
// compose::update keeps such a range and rewrites any other (such as '^0.2' or '0.3.0') to
// CurrentRange (req B8). A value that is not a range (a tag such as latest) is kept as well.
func AdmitsCurrent(r string) bool {
	c, err := semver.NewConstraint(r)
	if err != nil {
		return true
	}
	// The admitted 0.3.x form intervals whose ends are patch numbers r names, so probing each
	// from 1 up to two past the largest one named finds any admitted release.
	last := firstSafe.Patch()
	for _, m := range patchOf.FindAllStringSubmatch(r, -1) {
		if n, err := strconv.ParseUint(m[1], 10, 32); err == nil && n > last {
			last = n
		}
	}
	for p := firstSafe.Patch(); p <= last+2; p++ {
		if c.Check(semver.New(0, 3, p, "", "")) {
			return true
		}
	}
	return false
}
