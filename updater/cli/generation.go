package cli

import (
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/iii-go/iii/updater/errcode"
	"github.com/iii-go/iii/updater/leftover"
)

// Self is the name of iii's own binary and asset.
const Self = "iii"

// Managed is a binary that `iii update` keeps beside iii.
type Managed struct {
	Name    string
	Alias   string   // short name accepted as TARGET
	Targets []string // triples it was published for
}

// legacyManaged are the binaries a 0.25 iii expects every release to carry beside iii.
var legacyManaged = []Managed{
	{Name: "iii-init", Targets: []string{
		"x86_64-unknown-linux-musl", "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-musl",
		"aarch64-unknown-linux-gnu", "x86_64-apple-darwin", "aarch64-apple-darwin"}},
	{Name: "iii-worker", Alias: "worker", Targets: []string{
		"aarch64-apple-darwin", "x86_64-apple-darwin", "x86_64-unknown-linux-gnu",
		"x86_64-unknown-linux-musl", "aarch64-unknown-linux-gnu"}},
}

// firstCurrent is the first release without iii-worker and iii-init.
var firstCurrent = semver.MustParse("0.26.0-0")

// Generation is what the running iii expects of a release: 0.25 and before expect the managed
// binaries iii-init and iii-worker beside iii, so their update to 0.26 installs iii, then fails
// on those assets and exits 1 (req I1); 0.26 expects iii alone.
type Generation struct{ legacy bool }

// GenerationOf returns the generation of a running version. Unparsable and 0.0.x development
// versions count as current.
func GenerationOf(version string) Generation {
	v, err := semver.NewVersion(version)
	if err != nil || (v.Major() == 0 && v.Minor() == 0) {
		return Generation{}
	}
	return Generation{legacy: v.LessThan(firstCurrent)}
}

// Current reports whether the generation is 0.26 or later.
func (g Generation) Current() bool { return !g.legacy }

// Managed returns the binaries kept beside iii.
func (g Generation) Managed() []Managed {
	if g.legacy {
		return legacyManaged
	}
	return nil
}

// Select returns the binaries to update for TARGET ("" = everything), in update order: iii
// first, then the managed binaries the target platform has.
func (g Generation) Select(target string) ([]string, error) {
	switch target {
	case "self", "iii", "iii-cli":
		return []string{Self}, nil
	case "":
		names := []string{Self}
		for _, m := range g.Managed() {
			names = append(names, m.Name)
		}
		return names, nil
	}
	for _, m := range g.Managed() {
		if target == m.Name || (m.Alias != "" && target == m.Alias) {
			return []string{m.Name}, nil
		}
	}
	for _, b := range leftover.Binaries {
		if target == b || target == strings.TrimPrefix(b, "iii-") {
			return nil, errcode.Usagef(errcode.TargetRemoved,
				"%s is not part of iii since 0.26: the sandbox-libkrun worker runs VMs now, and Compose installs it when a project needs it. Remove the old binary yourself.", b)
		}
	}
	return nil, errcode.Usagef(errcode.UnknownTarget,
		"unknown target '%s'. Run 'iii update --list-targets' to see the available targets.", target)
}

// forTarget keeps the names published for triple; iii is always kept.
func (g Generation) forTarget(names []string, triple string) []string {
	var out []string
	for _, n := range names {
		if n == Self || g.supports(n, triple) {
			out = append(out, n)
		}
	}
	return out
}

func (g Generation) supports(name, triple string) bool {
	for _, m := range g.Managed() {
		if m.Name == name {
			for _, t := range m.Targets {
				if t == triple {
					return true
				}
			}
		}
	}
	return false
}

// Newer reports whether version a is newer than b; an unparsable b is always older.
func Newer(a, b string) bool {
	va, err := semver.NewVersion(a)
	if err != nil {
		return false
	}
	vb, err := semver.NewVersion(b)
	if err != nil {
		return true
	}
	return va.GreaterThan(vb)
}
