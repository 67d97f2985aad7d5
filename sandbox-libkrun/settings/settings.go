// Package settings loads and validates the adapter's configuration entry. Validation fails
// closed: a wrong type, an unknown key, a negative number or a custom image that shadows a preset
// is an error that names the key, never a silent fallback to a default; the adapter then exits
// at start (req D5, D7).
package settings

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Presets are the built-in catalog images, by name, in their stable listing order.
var Presets = []Preset{
	{Name: "python", OCIRef: "docker.io/iiidev/python:latest"},
	{Name: "node", OCIRef: "docker.io/iiidev/node:latest"},
}

// Preset is one built-in image.
type Preset struct {
	Name   string
	OCIRef string
}

// ImageCaps bounds what a create may ask for one image; 0 means no cap.
type ImageCaps struct {
	MaxCPUs     uint32 `json:"max_cpus,omitempty"`
	MaxMemoryMB uint32 `json:"max_memory_mb,omitempty"`
}

// ImageNetwork is one image's entry of per_image_network.
type ImageNetwork struct {
	On     bool
	Egress *vm.Egress // with On, the policy; nil: the outside
}

// MarshalJSON shows the entry as it is written: "off", "on" or the policy object.
func (n ImageNetwork) MarshalJSON() ([]byte, error) {
	if n.Egress != nil {
		return json.Marshal(n.Egress.Entries())
	}
	return json.Marshal(vm.NetworkMode(n.On, nil))
}

// Settings is the validated adapter configuration.
type Settings struct {
	AutoInstall                 bool                 `json:"auto_install"`
	ImageAllowlist              []string             `json:"image_allowlist"`
	CustomImages                map[string]string    `json:"custom_images"`
	DefaultIdleTimeoutSecs      uint64               `json:"default_idle_timeout_secs"`
	MaxConcurrentSandboxes      uint32               `json:"max_concurrent_sandboxes"`
	MaxConcurrentExecPerSandbox uint32               `json:"max_concurrent_exec_per_sandbox"`
	MaxExecTimeoutMS            uint64               `json:"max_exec_timeout_ms"`
	DefaultCPUs                 uint32               `json:"default_cpus"`
	DefaultMemoryMB             uint32               `json:"default_memory_mb"`
	PerImageCaps                map[string]ImageCaps `json:"per_image_caps"`
	// PerImageNetwork is the operator's ceiling on the network of each named image's
	// sandboxes: off (none may have a network), on (no ceiling; the default for an image not
	// named) or a policy every sandbox of the image is held to, beside the creator's own.
	PerImageNetwork map[string]ImageNetwork `json:"per_image_network,omitempty"`
	// WarmPool is the number of pre-booted machines kept per image, resolved from warm_pool (a
	// map image → count, or one count for every allowlisted catalog image). Empty: no pool.
	WarmPool map[string]uint32 `json:"warm_pool"`
	// Accelerator chooses how VMs run: AccelKVM, AccelTCG or AccelAuto (see DefaultAccelerator).
	Accelerator string `json:"accelerator"`
	// GuestArch is the guest architecture (x86_64, aarch64); empty: the host's. Another one than
	// the host's runs only under software emulation (CheckGuest).
	GuestArch string `json:"guest_arch,omitempty"`
	// FileShare is how the image and mounts reach the guest: ShareVirtiofs or Share9P (see
	// DefaultFileShare).
	FileShare string `json:"file_share"`
	// WorkerDiskMB is the size of each VM worker's state disk, the sparse ext4 image in its
	// state directory that keeps what it writes outside its directory across boots; 0: none.
	WorkerDiskMB uint32 `json:"worker_disk_mb"`
	// Snapshots says whether cold sandboxes are restored from image snapshots (SnapshotsOn) or
	// always booted (SnapshotsOff). On by default.
	Snapshots string `json:"snapshots"`
	// SnapshotCacheMB bounds the disk the snapshots take (least recently used removed first).
	SnapshotCacheMB uint64 `json:"snapshot_cache_mb"`
	// UserSnapshotsMB bounds the disk the snapshots of running sandboxes take (sandbox::snapshot,
	// kept until sandbox::snapshot::delete): one that would pass it is refused S400 naming
	// user_snapshots_mb.
	UserSnapshotsMB uint64 `json:"user_snapshots_mb"`
	// IdleAction is what happens to a sandbox idle past its idle timeout: IdleStop (the
	// default) stops it, IdlePause pauses it (sandbox::pause; a sandbox that cannot be paused is
	// stopped).
	IdleAction string `json:"idle_action"`
	// MaxProcesses bounds the running processes of one sandbox (sandbox::process::start; exited
	// ones do not count): one more is S400 naming max_processes.
	MaxProcesses uint32 `json:"max_processes"`
	// ProcessRingBytes is the output a process keeps per stream while no one is attached, for
	// the next sandbox::process::attach; older bytes are dropped (and counted) past it.
	ProcessRingBytes uint64 `json:"process_ring_bytes"`
	// ExposeHost is the host address sandbox::expose listens on: loopback unless set, so an
	// exposed port reaches the rest of the network only when the operator says so.
	ExposeHost string `json:"expose_host"`
	// MaxExposedPorts bounds the ports one sandbox exposes at once; one more is S400.
	MaxExposedPorts uint32 `json:"max_exposed_ports"`
	// MaxExposeConnections bounds the open connections of one exposed port; a connection past
	// it is closed at once (and logged).
	MaxExposeConnections uint32 `json:"max_expose_connections"`

	warmRaw any // warm_pool as given, resolved once the allowlist and custom_images are known
}

// Defaults and bounds of the process settings: the guest agent runs at most
// vm.MaxGuestProcesses, and a ring larger than 64 MiB per stream would let a few processes hold
// the sandbox's memory.
const (
	DefaultMaxProcesses     = 128
	DefaultProcessRingBytes = vm.DefaultRingBytes
	MaxProcessRingBytes     = 64 << 20
)

// Defaults of the exposed-port settings.
const (
	DefaultExposeHost           = "127.0.0.1"
	DefaultMaxExposedPorts      = 8
	DefaultMaxExposeConnections = 64
)

// Minimums a VM needs; smaller values are rejected at load and at create.
const (
	MinCPUs     = 1
	MinMemoryMB = 128
)

// Bounds of worker_disk_mb when it is not 0: ext4 with a journal needs a few MiB, and a disk
// larger than 1 TiB is surely a typo (the image is sparse, so the default costs only what a
// worker writes).
const (
	DefaultWorkerDiskMB = 4096
	MinWorkerDiskMB     = 64
	MaxWorkerDiskMB     = 1 << 20
)

// Accelerators the accelerator key accepts. kvm needs read/write /dev/kvm (req H2) and never
// falls back; tcg is qemu's software emulation, slower but runs on any host; auto uses KVM when
// a probe boot under it reaches the guest agent, else TCG. hvf is macOS's Hypervisor.framework.
const (
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
	AccelAuto = "auto"
	AccelHVF  = "hvf"
)

// Accelerators lists the accepted accelerator values.
var Accelerators = []string{AccelKVM, AccelTCG, AccelAuto, AccelHVF}

// DefaultAccelerator is the accelerator of a host when the key is not set: kvm on Linux (req
// H2), hvf on macOS.
func DefaultAccelerator(goos string) string {
	if goos == "darwin" {
		return AccelHVF
	}
	return AccelKVM
}

// The file shares the file_share key accepts: virtiofs (virtiofsd, Linux) or 9p (qemu's own
// virtio-9p server: macOS, where virtiofsd does not exist, and Linux).
const (
	ShareVirtiofs = vm.ShareVirtiofs
	Share9P       = vm.Share9P
)

// DefaultFileShare is the file share of a host when the key is not set: 9p on macOS, virtiofs
// elsewhere.
func DefaultFileShare(goos string) string {
	if goos == "darwin" {
		return Share9P
	}
	return ShareVirtiofs
}

// Guest resolves the guest architecture for a host of Go architecture goarch under accelerator
// accel (the setting, or $III_SANDBOX_ACCELERATOR), failing closed: guest_arch other than the
// host's runs only under software emulation (tcg, or auto, which then means tcg); virtiofs does
// not exist on macOS; kvm is Linux's and hvf macOS's.
func (s Settings) Guest(accel, goos, goarch string) (guestarch.Arch, error) {
	host, known := guestarch.ForGOARCH(goarch)
	arch := host
	if s.GuestArch != "" {
		a, err := guestarch.Parse(s.GuestArch)
		if err != nil {
			return a, bad("guest_arch", "must be one of %s, got %q", strings.Join(guestarch.Names(), ", "), s.GuestArch)
		}
		arch = a
	}
	if known && arch.GOARCH != host.GOARCH && accel != AccelTCG && accel != AccelAuto {
		return arch, bad("guest_arch", "%s differs from this host's %s: such a guest runs only under software emulation; set `accelerator: tcg` (accelerator is %s)", arch.Name, host.Name, accel)
	}
	switch {
	case goos == "darwin" && s.FileShare == ShareVirtiofs:
		return arch, bad("file_share", "virtiofs needs virtiofsd, which does not exist on macOS; use 9p")
	case goos == "darwin" && accel == AccelKVM:
		return arch, bad("accelerator", "kvm is Linux's; on macOS use hvf (Hypervisor.framework), auto or tcg")
	}
	return arch, nil
}

// MaxWarmPool bounds warm_pool's count for one image.
const MaxWarmPool = 8

// PublishedDefaults is the configuration the worker registry publishes with the adapter package
// (published-defaults.json: the presets allowlisted, unlike Defaults). The release's registry
// step and the test registry read that file; Compose layers a project's config_override on it.
//
//go:embed published-defaults.json
var PublishedDefaults []byte

// Defaults are the package defaults: everything off or conservative; the allowlist is empty, so
// every create is denied until it is set.
func Defaults() Settings {
	return Settings{
		AutoInstall:                 true,
		ImageAllowlist:              []string{},
		CustomImages:                map[string]string{},
		DefaultIdleTimeoutSecs:      300,
		MaxConcurrentSandboxes:      32,
		MaxConcurrentExecPerSandbox: 4,
		MaxExecTimeoutMS:            300000,
		DefaultCPUs:                 1,
		DefaultMemoryMB:             512,
		PerImageCaps:                map[string]ImageCaps{},
		WarmPool:                    map[string]uint32{},
		Accelerator:                 DefaultAccelerator(runtime.GOOS),
		FileShare:                   DefaultFileShare(runtime.GOOS),
		WorkerDiskMB:                DefaultWorkerDiskMB,
		Snapshots:                   SnapshotsOn,
		SnapshotCacheMB:             DefaultSnapshotCacheMB,
		UserSnapshotsMB:             DefaultUserSnapshotsMB,
		IdleAction:                  IdleStop,
		MaxProcesses:                DefaultMaxProcesses,
		ProcessRingBytes:            DefaultProcessRingBytes,
		ExposeHost:                  DefaultExposeHost,
		MaxExposedPorts:             DefaultMaxExposedPorts,
		MaxExposeConnections:        DefaultMaxExposeConnections,
	}
}

// The values of the snapshots key.
const (
	SnapshotsOn  = "on"
	SnapshotsOff = "off"
)

// DefaultSnapshotCacheMB is snapshot_cache_mb when it is not set: room for the two presets at a
// few sizes (a snapshot of the python preset at 512 MiB is about 190 MiB with its root disk).
const DefaultSnapshotCacheMB = 4096

// The values of the idle_action key.
const (
	IdleStop  = "stop"
	IdlePause = "pause"
)

// DefaultUserSnapshotsMB is user_snapshots_mb when it is not set.
const DefaultUserSnapshotsMB = 8192

// Keys lists every accepted top-level key, sorted.
func Keys() []string {
	return slices.Sorted(maps.Keys(fields))
}

// Error is a validation failure; Key names the offending key (dotted for nested ones).
type Error struct {
	Key     string
	Message string
	// Err is the cause, when the message was built from one with %w (a parse error).
	Err error
}

// Error names the key and what is wrong with it.
func (e *Error) Error() string {
	if e.Key == "" {
		return "invalid adapter settings: " + e.Message
	}
	return "invalid adapter setting `" + e.Key + "`: " + e.Message
}

// Unwrap returns the cause, so errors.Is and errors.As see through to a parse error.
func (e *Error) Unwrap() error { return e.Err }

func bad(key, format string, a ...any) *Error {
	err := fmt.Errorf(format, a...)
	return &Error{Key: key, Message: err.Error(), Err: errors.Unwrap(err)}
}

// fields maps each key to the function that applies its raw value to s.
var fields = map[string]func(s *Settings, key string, v any) error{
	"auto_install": func(s *Settings, k string, v any) error {
		b, ok := v.(bool)
		if !ok {
			return bad(k, "must be true or false, got %s", describe(v))
		}
		s.AutoInstall = b
		return nil
	},
	"image_allowlist": func(s *Settings, k string, v any) error {
		list, err := stringList(k, v)
		s.ImageAllowlist = list
		return err
	},
	"custom_images": func(s *Settings, k string, v any) error {
		m, ok := v.(map[string]any)
		if !ok {
			return bad(k, "must be a map of image name to OCI reference, got %s", describe(v))
		}
		out := map[string]string{}
		for _, name := range slices.Sorted(maps.Keys(m)) {
			if strings.TrimSpace(name) == "" {
				return bad(k, "custom_images key must not be empty")
			}
			if IsPreset(name) {
				return bad(k+"."+name, "custom_images key '%s' shadows a built-in preset — rename it (presets: %s)", name, presetNames())
			}
			ref, ok := m[name].(string)
			if !ok {
				return bad(k+"."+name, "must be an OCI reference string, got %s", describe(m[name]))
			}
			if strings.TrimSpace(ref) == "" {
				return bad(k+"."+name, "OCI reference must not be empty")
			}
			out[name] = ref
		}
		s.CustomImages = out
		return nil
	},
	"default_idle_timeout_secs": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, math.MaxUint64)
		s.DefaultIdleTimeoutSecs = n
		return err
	},
	"max_concurrent_sandboxes": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, math.MaxUint32)
		s.MaxConcurrentSandboxes = uint32(n)
		return err
	},
	"max_concurrent_exec_per_sandbox": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, math.MaxUint32)
		s.MaxConcurrentExecPerSandbox = uint32(n)
		return err
	},
	"max_exec_timeout_ms": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, math.MaxUint64)
		if err == nil && n == 0 {
			return bad(k, "must be at least 1")
		}
		s.MaxExecTimeoutMS = n
		return err
	},
	"max_processes": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, vm.MaxGuestProcesses)
		if err == nil && n == 0 {
			return bad(k, "must be at least 1")
		}
		s.MaxProcesses = uint32(n)
		return err
	},
	"process_ring_bytes": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, MaxProcessRingBytes)
		if err == nil && n == 0 {
			return bad(k, "must be at least 1")
		}
		s.ProcessRingBytes = n
		return err
	},
	"expose_host": func(s *Settings, k string, v any) error {
		h, ok := v.(string)
		if !ok || net.ParseIP(h) == nil {
			return bad(k, "must be an IP address of this host (127.0.0.1, ::1, 0.0.0.0 for every interface), got %s", describe(v))
		}
		s.ExposeHost = h
		return nil
	},
	"max_exposed_ports": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, 1024)
		if err == nil && n == 0 {
			return bad(k, "must be at least 1")
		}
		s.MaxExposedPorts = uint32(n)
		return err
	},
	"max_expose_connections": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, 65536)
		if err == nil && n == 0 {
			return bad(k, "must be at least 1")
		}
		s.MaxExposeConnections = uint32(n)
		return err
	},
	"default_cpus": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, math.MaxUint32)
		if err == nil && n < MinCPUs {
			return bad(k, "must be at least %d", MinCPUs)
		}
		s.DefaultCPUs = uint32(n)
		return err
	},
	"default_memory_mb": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, math.MaxUint32)
		if err == nil && n < MinMemoryMB {
			return bad(k, "must be at least %d (a VM needs %d MiB)", MinMemoryMB, MinMemoryMB)
		}
		s.DefaultMemoryMB = uint32(n)
		return err
	},
	"worker_disk_mb": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, MaxWorkerDiskMB)
		if err == nil && n != 0 && n < MinWorkerDiskMB {
			return bad(k, "must be 0 (no state disk) or at least %d", MinWorkerDiskMB)
		}
		s.WorkerDiskMB = uint32(n)
		return err
	},
	"per_image_caps": func(s *Settings, k string, v any) error {
		m, ok := v.(map[string]any)
		if !ok {
			return bad(k, "must be a map of image name to {max_cpus, max_memory_mb}, got %s", describe(v))
		}
		out := map[string]ImageCaps{}
		for _, name := range slices.Sorted(maps.Keys(m)) {
			key := k + "." + name
			if strings.TrimSpace(name) == "" {
				return bad(k, "image name must not be empty")
			}
			caps, ok := m[name].(map[string]any)
			if !ok {
				return bad(key, "must be a map with max_cpus and/or max_memory_mb, got %s", describe(m[name]))
			}
			var c ImageCaps
			for _, ck := range slices.Sorted(maps.Keys(caps)) {
				n, err := uintValue(key+"."+ck, caps[ck], math.MaxUint32)
				if err != nil {
					return err
				}
				switch ck {
				case "max_cpus":
					c.MaxCPUs = uint32(n)
				case "max_memory_mb":
					c.MaxMemoryMB = uint32(n)
				default:
					return bad(key+"."+ck, "unknown key (accepted: max_cpus, max_memory_mb)")
				}
			}
			out[name] = c
		}
		s.PerImageCaps = out
		return nil
	},
	"accelerator": func(s *Settings, k string, v any) error {
		a, ok := v.(string)
		if !ok || !slices.Contains(Accelerators, a) {
			return bad(k, "must be one of %s, got %s", strings.Join(Accelerators, ", "), describe(v))
		}
		s.Accelerator = a
		return nil
	},
	"guest_arch": func(s *Settings, k string, v any) error {
		a, ok := v.(string)
		if !ok {
			return bad(k, "must be one of %s, got %s", strings.Join(guestarch.Names(), ", "), describe(v))
		}
		arch, err := guestarch.Parse(a)
		if err != nil || arch.Name != a {
			return bad(k, "must be one of %s, got %s", strings.Join(guestarch.Names(), ", "), describe(v))
		}
		s.GuestArch = a
		return nil
	},
	"file_share": func(s *Settings, k string, v any) error {
		f, ok := v.(string)
		if !ok || (f != ShareVirtiofs && f != Share9P) {
			return bad(k, "must be one of %s, %s, got %s", ShareVirtiofs, Share9P, describe(v))
		}
		s.FileShare = f
		return nil
	},
	"snapshots": func(s *Settings, k string, v any) error {
		f, ok := v.(string)
		if b, isBool := v.(bool); isBool {
			f, ok = map[bool]string{true: SnapshotsOn, false: SnapshotsOff}[b], true
		}
		if !ok || (f != SnapshotsOn && f != SnapshotsOff) {
			return bad(k, "must be %s or %s, got %s", SnapshotsOn, SnapshotsOff, describe(v))
		}
		s.Snapshots = f
		return nil
	},
	"snapshot_cache_mb": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, math.MaxUint32)
		s.SnapshotCacheMB = n
		return err
	},
	"idle_action": func(s *Settings, k string, v any) error {
		f, ok := v.(string)
		if !ok || (f != IdleStop && f != IdlePause) {
			return bad(k, "must be %s or %s, got %s", IdleStop, IdlePause, describe(v))
		}
		s.IdleAction = f
		return nil
	},
	"user_snapshots_mb": func(s *Settings, k string, v any) error {
		n, err := uintValue(k, v, math.MaxUint32)
		s.UserSnapshotsMB = n
		return err
	},
	"per_image_network": func(s *Settings, k string, v any) error {
		m, ok := v.(map[string]any)
		if !ok {
			return bad(k, "must be a map of image name to a network (\"off\", \"on\" or {\"allow\": [...], \"deny\": [...]}), got %s", describe(v))
		}
		out := map[string]ImageNetwork{}
		for _, name := range slices.Sorted(maps.Keys(m)) {
			if strings.TrimSpace(name) == "" {
				return bad(k, "image name must not be empty")
			}
			on, e, err := vm.ParseNetwork(k+"."+name, m[name])
			if err != nil {
				return &Error{Key: k + "." + name, Message: err.Error()}
			}
			out[name] = ImageNetwork{On: on, Egress: e}
		}
		s.PerImageNetwork = out
		return nil
	},
	"warm_pool": func(s *Settings, k string, v any) error {
		if m, ok := v.(map[string]any); ok {
			for _, name := range slices.Sorted(maps.Keys(m)) {
				if strings.TrimSpace(name) == "" {
					return bad(k, "image name must not be empty")
				}
				if _, err := uintValue(k+"."+name, m[name], MaxWarmPool); err != nil {
					return err
				}
			}
		} else if _, err := uintValue(k, v, MaxWarmPool); err != nil {
			return bad(k, "must be a count (0-%d) for every allowlisted image or a map of image name to count, got %s", MaxWarmPool, describe(v))
		}
		s.warmRaw = v
		return nil
	},
}

// fitsCaps reports whether a machine with the default cpus and memory is within image's caps.
func (s *Settings) fitsCaps(image string) bool {
	c := s.PerImageCaps[image]
	return (c.MaxCPUs == 0 || s.DefaultCPUs <= c.MaxCPUs) && (c.MaxMemoryMB == 0 || s.DefaultMemoryMB <= c.MaxMemoryMB)
}

// resolveWarmPool turns warm_pool into per-image counts: each named image must be allowlisted,
// in the catalog and within its per_image_caps at the default size, and the pool may hold no
// more machines than max_concurrent_sandboxes. The single count skips the images that are not.
func resolveWarmPool(s *Settings) error {
	const k = "warm_pool"
	allowed := map[string]bool{}
	for _, name := range s.ImageAllowlist {
		allowed[name] = true
	}
	inCatalog := func(name string) bool { return IsPreset(name) || s.CustomImages[name] != "" }
	out := map[string]uint32{}
	total := uint64(0)
	switch v := s.warmRaw.(type) {
	case nil:
	case map[string]any:
		for _, name := range slices.Sorted(maps.Keys(v)) {
			n, _ := uintValue(k+"."+name, v[name], MaxWarmPool)
			switch {
			case !allowed[name]:
				return bad(k+"."+name, "image '%s' is not in image_allowlist", name)
			case !inCatalog(name):
				return bad(k+"."+name, "image '%s' is neither a preset nor a custom_images key", name)
			case n > 0 && !s.fitsCaps(name):
				return bad(k+"."+name, "default_cpus/default_memory_mb exceed per_image_caps.%s, so no create could take a pooled machine", name)
			}
			if n > 0 {
				out[name] = uint32(n)
				total += n
			}
		}
	default:
		n, _ := uintValue(k, v, MaxWarmPool)
		for _, name := range s.ImageAllowlist {
			if n > 0 && inCatalog(name) && s.fitsCaps(name) && out[name] == 0 {
				out[name] = uint32(n)
				total += n
			}
		}
	}
	if total > uint64(s.MaxConcurrentSandboxes) {
		return bad(k, "keeps %d machines warm, more than max_concurrent_sandboxes (%d)", total, s.MaxConcurrentSandboxes)
	}
	s.WarmPool = out
	s.warmRaw = nil
	return nil
}

// IsPreset reports whether name is a built-in preset.
func IsPreset(name string) bool {
	for _, p := range Presets {
		if p.Name == name {
			return true
		}
	}
	return false
}

func presetNames() string {
	names := make([]string, len(Presets))
	for i, p := range Presets {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// Parse validates a configuration value (the decoded JSON or YAML document, a map) layered over
// the package defaults. It returns the settings and warnings to print at start.
func Parse(doc any) (Settings, []string, error) {
	s := Defaults()
	if doc == nil {
		return s, nil, nil
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return s, nil, bad("", "the configuration must be a map of keys, got %s", describe(doc))
	}
	if _, legacy := m["sandbox"]; legacy {
		return s, nil, bad("sandbox", "legacy wrapped shape detected: move fields from `sandbox:` to the top level.")
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		apply, ok := fields[k]
		if !ok {
			return s, nil, bad(k, "unknown key (accepted: %s)", strings.Join(Keys(), ", "))
		}
		if m[k] == nil {
			return s, nil, bad(k, "must have a value, got null")
		}
		if err := apply(&s, k, m[k]); err != nil {
			return s, nil, err
		}
	}
	if err := resolveWarmPool(&s); err != nil {
		return s, nil, err
	}
	var warnings []string
	if s.MaxConcurrentExecPerSandbox == 0 {
		s.MaxConcurrentExecPerSandbox = 1
		warnings = append(warnings, "max_concurrent_exec_per_sandbox is 0, which means 1 (not unlimited)")
	}
	if len(s.ImageAllowlist) == 0 {
		warnings = append(warnings, "image_allowlist is empty: every sandbox::create fails with S100 until it lists an image")
	}
	for _, name := range s.ImageAllowlist {
		if !IsPreset(name) && s.CustomImages[name] == "" {
			warnings = append(warnings, fmt.Sprintf("image_allowlist names '%s', which is neither a preset nor a custom_images key", name))
		}
	}
	return s, warnings, nil
}

// ParseJSON validates a JSON document.
func ParseJSON(data []byte) (Settings, []string, error) {
	doc, err := decodeJSON(data)
	if err != nil {
		return Defaults(), nil, bad("", "not valid JSON: %w", err)
	}
	return Parse(doc)
}

// ParseYAML validates a YAML (or JSON) document.
func ParseYAML(data []byte) (Settings, []string, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Defaults(), nil, bad("", "not valid YAML: %w", err)
	}
	// Re-encode through JSON so that both sources share one value model (json.Number numbers,
	// string-keyed maps).
	raw, err := json.Marshal(doc)
	if err != nil {
		return Defaults(), nil, bad("", "unsupported YAML value: %w", err)
	}
	return ParseJSON(raw)
}

// LoadFile reads and validates a YAML or JSON file.
func LoadFile(path string) (Settings, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Defaults(), nil, &Error{Message: fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	return ParseYAML(data)
}

func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// uintValue reads a non-negative integer no larger than max.
func uintValue(key string, v any, max uint64) (uint64, error) {
	var text string
	switch n := v.(type) {
	case json.Number:
		text = n.String()
	case float64:
		text = fmt.Sprint(n)
	case int:
		text = fmt.Sprint(n)
	default:
		return 0, bad(key, "must be a non-negative integer, got %s", describe(v))
	}
	if strings.HasPrefix(text, "-") {
		return 0, bad(key, "must be a non-negative integer, got %s", text)
	}
	u, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, bad(key, "must be a non-negative integer, got %s", text)
	}
	if u > max {
		return 0, bad(key, "must be at most %d, got %s", max, text)
	}
	return u, nil
}

func stringList(key string, v any) ([]string, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, bad(key, "must be a list of image names, got %s", describe(v))
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, bad(fmt.Sprintf("%s.%d", key, i), "must be a string, got %s", describe(it))
		}
		if strings.TrimSpace(s) == "" {
			return nil, bad(fmt.Sprintf("%s.%d", key, i), "must not be empty")
		}
		out = append(out, s)
	}
	return out, nil
}

// describe names the JSON type of v for messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("a boolean (%v)", x)
	case json.Number, float64, int:
		return fmt.Sprintf("a number (%v)", x)
	case string:
		return fmt.Sprintf("a string (%q)", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}
