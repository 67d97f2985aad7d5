// Package release builds iii's release assets: one archive per product and target triple with a
// sha256 sidecar, a sorted checksums.txt and a manifest.json. Archives are reproducible: fixed
// mtimes, uid/gid 0, sorted entries, deterministic compression.
package release

import (
	"slices"
	"strings"
)

// Product is a binary that ships as release assets.
type Product struct {
	Name        string // binary and asset name prefix: iii, sandbox-libkrun
	Package     string // Go package relative to the repository root
	VersionFile string // file holding the product's version, relative to the repository root
	// Firmware marks the product whose archives carry the VM firmware of their target in
	// firmware/ beside the binary (the sandbox adapter installs it at start).
	Firmware bool
	// Worker marks a product published into the worker registry as a binary package of the
	// same name, which Compose installs from a project's package:// container.
	Worker bool
	// DefaultConfig is the JSON file, relative to the repository root, of the configuration the
	// registry publishes with the worker package; "" for none. It lives beside the product's code.
	DefaultConfig string
	// IIILines are iii's version lines (MAJOR.MINOR) of the worker of the same name that this
	// build serves: the registry step writes them into the package's compatibility table, so a
	// compose file pinned to iii's versions (state "0.22.2") resolves to this build, and Compose
	// says so. They are the lines iii 0.26's own compose files and docs pin; a line is added here
	// only once this build implements what that line of iii's worker offers.
	IIILines []string
}

// Target is one platform an asset is built for.
type Target struct {
	Triple   string   // e.g. x86_64-unknown-linux-gnu
	GOOS     string   // Go's OS name
	GOARCH   string   // Go's architecture name
	Archive  string   // "tar.gz" or "zip"
	Products []string // names of the products built for this target
}

// Products lists every product that ships. iii-worker and iii-init are gone in 0.26 (req A1).
// The event workers (http, cron, queue, state, pubsub, stream) are project workers, as in iii 0.23+;
// rbac-proxy is the RBAC gate in front of an engine and bridge joins two engines, as iii's
// workers of those names.
var Products = []Product{
	{Name: "iii", Package: ".", VersionFile: "VERSION"},
	{Name: "sandbox-libkrun", Package: "./sandbox-libkrun", VersionFile: "sandbox-libkrun/VERSION", Firmware: true, Worker: true,
		DefaultConfig: "sandbox-libkrun/settings/published-defaults.json"},
	{Name: "http", Package: "./workers/cmd/http", VersionFile: "workers/VERSION", Worker: true, IIILines: []string{"0.21"}},
	{Name: "cron", Package: "./workers/cmd/cron", VersionFile: "workers/VERSION", Worker: true, IIILines: []string{"0.21"}},
	{Name: "queue", Package: "./workers/cmd/queue", VersionFile: "workers/VERSION", Worker: true, IIILines: []string{"0.21"}},
	{Name: "state", Package: "./workers/cmd/state", VersionFile: "workers/VERSION", Worker: true, IIILines: []string{"0.21", "0.22"}},
	{Name: "pubsub", Package: "./workers/cmd/pubsub", VersionFile: "workers/VERSION", Worker: true, IIILines: []string{"0.21"}},
	{Name: "stream", Package: "./workers/cmd/stream", VersionFile: "workers/VERSION", Worker: true},
	{Name: "rbac-proxy", Package: "./workers/cmd/rbac-proxy", VersionFile: "workers/VERSION", Worker: true},
	{Name: "bridge", Package: "./workers/cmd/bridge", VersionFile: "workers/VERSION", Worker: true},
}

// eventWorkers ship for every target iii ships for, and so do the rbac-proxy and bridge workers.
var eventWorkers = []string{"http", "cron", "queue", "state", "pubsub", "stream", "rbac-proxy", "bridge"}

// Targets is the one table of release targets: iii and the event workers ship for all of them;
// the sandbox adapter only for Apple Silicon macOS and glibc Linux (req H1, H4).
var Targets = []Target{
	{"aarch64-apple-darwin", "darwin", "arm64", "tar.gz", append([]string{"iii", "sandbox-libkrun"}, eventWorkers...)},
	{"x86_64-apple-darwin", "darwin", "amd64", "tar.gz", append([]string{"iii"}, eventWorkers...)},
	{"x86_64-unknown-linux-gnu", "linux", "amd64", "tar.gz", append([]string{"iii", "sandbox-libkrun"}, eventWorkers...)},
	{"x86_64-unknown-linux-musl", "linux", "amd64", "tar.gz", append([]string{"iii"}, eventWorkers...)},
	{"aarch64-unknown-linux-gnu", "linux", "arm64", "tar.gz", append([]string{"iii", "sandbox-libkrun"}, eventWorkers...)},
	{"aarch64-unknown-linux-musl", "linux", "arm64", "tar.gz", append([]string{"iii"}, eventWorkers...)},
	{"x86_64-pc-windows-msvc", "windows", "amd64", "zip", append([]string{"iii"}, eventWorkers...)},
	{"aarch64-pc-windows-msvc", "windows", "arm64", "zip", append([]string{"iii"}, eventWorkers...)},
}

// Ships reports whether product p is built for target t.
func (t Target) Ships(p string) bool { return slices.Contains(t.Products, p) }

// TriplesOf lists the triples of the targets product p is built for, in table order.
func TriplesOf(p string) []string {
	var out []string
	for _, t := range Targets {
		if t.Ships(p) {
			out = append(out, t.Triple)
		}
	}
	return out
}

// ProductNamed returns the product called name from Products.
func ProductNamed(name string) (Product, bool) {
	i := slices.IndexFunc(Products, func(p Product) bool { return p.Name == name })
	if i < 0 {
		return Product{}, false
	}
	return Products[i], true
}

// Exe is the binary's file name inside the archive.
func (t Target) Exe(product string) string {
	if t.GOOS == "windows" {
		return product + ".exe"
	}
	return product
}

// AssetName is the archive's file name: <product>-<triple>.<archive>.
func (t Target) AssetName(product string) string {
	return product + "-" + t.Triple + "." + t.Archive
}

// GuestArch is the guest architecture (uname -m) of the VMs an adapter of target t boots: its
// own, since each target runs its guests natively (KVM on Linux, HVF on macOS).
func (t Target) GuestArch() string {
	arch, _, _ := strings.Cut(t.Triple, "-")
	return arch
}

// FirmwareTriple names the firmware the adapter archive of t carries: the Linux target of its
// guest architecture (dist/firmware/<triple>/), as a guest is Linux on every host; Apple Silicon
// carries aarch64-unknown-linux-gnu's.
func (t Target) FirmwareTriple() string { return t.GuestArch() + "-unknown-linux-gnu" }

// FirmwareTriples lists, once each, the firmware every adapter archive carries.
func FirmwareTriples() []string {
	var out []string
	for _, t := range Targets {
		for _, p := range Products {
			if p.Firmware && t.Ships(p.Name) && !slices.Contains(out, t.FirmwareTriple()) {
				out = append(out, t.FirmwareTriple())
			}
		}
	}
	return out
}

// FindTarget returns the target with the given triple.
func FindTarget(triple string) (Target, bool) {
	for _, t := range Targets {
		if t.Triple == triple {
			return t, true
		}
	}
	return Target{}, false
}
