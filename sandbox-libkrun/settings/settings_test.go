package settings

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	s, warnings, err := ParseJSON([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if !s.AutoInstall || len(s.ImageAllowlist) != 0 || s.DefaultIdleTimeoutSecs != 300 || s.MaxConcurrentSandboxes != 32 ||
		s.MaxConcurrentExecPerSandbox != 4 || s.MaxExecTimeoutMS != 300000 || s.DefaultCPUs != 1 || s.DefaultMemoryMB != 512 || s.Accelerator != AccelKVM ||
		s.WorkerDiskMB != DefaultWorkerDiskMB {
		t.Fatalf("defaults %+v", s)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "image_allowlist is empty") {
		t.Fatalf("warnings %v", warnings)
	}
}

func TestFullValue(t *testing.T) {
	s, _, err := ParseYAML([]byte(`
auto_install: false
image_allowlist: [python, tools]
custom_images:
  tools: docker.io/example/tools:1
default_idle_timeout_secs: 30
max_concurrent_sandboxes: 2
max_concurrent_exec_per_sandbox: 3
max_exec_timeout_ms: 1000
default_cpus: 2
default_memory_mb: 256
worker_disk_mb: 0
per_image_caps:
  python: {max_cpus: 2, max_memory_mb: 1024}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.AutoInstall || s.CustomImages["tools"] != "docker.io/example/tools:1" || s.MaxConcurrentSandboxes != 2 ||
		s.PerImageCaps["python"].MaxMemoryMB != 1024 || s.DefaultCPUs != 2 || s.MaxExecTimeoutMS != 1000 || s.WorkerDiskMB != 0 {
		t.Fatalf("parsed %+v", s)
	}
}

func TestFailsClosed(t *testing.T) {
	cases := []struct{ doc, key, msg string }{
		{`{"auto_install":"yes"}`, "auto_install", "must be true or false"},
		{`{"max_concurrent_sandboxes":-1}`, "max_concurrent_sandboxes", "non-negative integer, got -1"},
		{`{"default_memory_mb":1.5}`, "default_memory_mb", "non-negative integer"},
		{`{"default_memory_mb":64}`, "default_memory_mb", "at least 128"},
		{`{"default_cpus":0}`, "default_cpus", "at least 1"},
		{`{"worker_disk_mb":63}`, "worker_disk_mb", "must be 0 (no state disk) or at least 64"},
		{`{"worker_disk_mb":1048577}`, "worker_disk_mb", "at most 1048576"},
		{`{"worker_disk_mb":"4G"}`, "worker_disk_mb", "non-negative integer"},
		{`{"max_concurrent_sandboxes":5000000000}`, "max_concurrent_sandboxes", "at most"},
		{`{"max_processes":0}`, "max_processes", "must be at least 1"},
		{`{"expose_host":"localhost"}`, "expose_host", "must be an IP address"},
		{`{"max_exposed_ports":0}`, "max_exposed_ports", "must be at least 1"},
		{`{"max_expose_connections":65537}`, "max_expose_connections", "must be at most 65536"},
		{`{"max_processes":1025}`, "max_processes", "must be at most 1024"},
		{`{"max_processes":"many"}`, "max_processes", "non-negative integer"},
		{`{"process_ring_bytes":0}`, "process_ring_bytes", "must be at least 1"},
		{`{"process_ring_bytes":67108865}`, "process_ring_bytes", "must be at most 67108864"},
		{`{"process_ring_bytes":-1}`, "process_ring_bytes", "non-negative"},
		{`{"image_allowlist":"python"}`, "image_allowlist", "must be a list"},
		{`{"image_allowlist":[1]}`, "image_allowlist.0", "must be a string"},
		{`{"custom_images":{"python":"docker.io/evil/python"}}`, "custom_images.python", "custom_images key 'python' shadows a built-in preset — rename it (presets: python, node)"},
		{`{"custom_images":{"":"docker.io/x/y"}}`, "custom_images", "custom_images key must not be empty"},
		{`{"custom_images":{"x":""}}`, "custom_images.x", "must not be empty"},
		{`{"per_image_network":"off"}`, "per_image_network", "must be a map of image name"},
		{`{"per_image_network":{"python":"closed"}}`, "per_image_network.python", `per_image_network.python: "closed" is not a network mode`},
		{`{"per_image_network":{"python":{"allow":["10.0.0.1/8"]}}}`, "per_image_network.python", `per_image_network.python.allow[0]: entry "10.0.0.1/8": bits are set beyond the prefix length`},
		{`{"per_image_network":{"python":{"allow":[],"ports":[]}}}`, "per_image_network.python", "per_image_network.python.ports: unknown key"},
		{`{"per_image_caps":{"python":{"max_gpus":1}}}`, "per_image_caps.python.max_gpus", "unknown key"},
		{`{"per_image_caps":{"python":{"max_cpus":-2}}}`, "per_image_caps.python.max_cpus", "non-negative"},
		{`{"imageallowlist":[]}`, "imageallowlist", "unknown key (accepted: accelerator, auto_install, custom_images"},
		{`{"sandbox":{"auto_install":true}}`, "sandbox", "legacy wrapped shape detected"},
		{`{"default_cpus":null}`, "default_cpus", "null"},
		{`[1,2]`, "", "must be a map"},
		{`{"accelerator":"qemu"}`, "accelerator", "must be one of kvm, tcg, auto, hvf, got a string (\"qemu\")"},
		{`{"accelerator":true}`, "accelerator", "must be one of kvm, tcg, auto, hvf"},
		{`{"snapshots":"yes"}`, "snapshots", "must be on or off, got a string (\"yes\")"},
		{`{"snapshot_cache_mb":-1}`, "snapshot_cache_mb", "non-negative"},
		{`{"user_snapshots_mb":-1}`, "user_snapshots_mb", "non-negative"},
		{`{"idle_action":"sleep"}`, "idle_action", "must be stop or pause, got a string (\"sleep\")"},
		{`{"warm_pool":"python"}`, "warm_pool", "must be a count (0-8) for every allowlisted image or a map"},
		{`{"warm_pool":9}`, "warm_pool", "must be a count"},
		{`{"warm_pool":{"python":-1}}`, "warm_pool.python", "non-negative"},
		{`{"warm_pool":{"python":9}}`, "warm_pool.python", "at most 8"},
		{`{"warm_pool":{"":1}}`, "warm_pool", "image name must not be empty"},
		{`{"warm_pool":{"python":1}}`, "warm_pool.python", "image 'python' is not in image_allowlist"},
		{`{"image_allowlist":["ghost"],"warm_pool":{"ghost":1}}`, "warm_pool.ghost", "neither a preset nor a custom_images key"},
		{`{"image_allowlist":["python"],"per_image_caps":{"python":{"max_memory_mb":256}},"warm_pool":{"python":1}}`, "warm_pool.python", "exceed per_image_caps.python"},
		{`{"image_allowlist":["python","node"],"max_concurrent_sandboxes":3,"warm_pool":2}`, "warm_pool", "keeps 4 machines warm, more than max_concurrent_sandboxes (3)"},
	}
	for _, c := range cases {
		_, _, err := ParseJSON([]byte(c.doc))
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%s: want a settings error, got %v", c.doc, err)
		}
		if e.Key != c.key || !strings.Contains(e.Message, c.msg) {
			t.Fatalf("%s: got key %q message %q", c.doc, e.Key, e.Message)
		}
		if c.key != "" && !strings.Contains(err.Error(), "`"+c.key+"`") {
			t.Fatalf("%s: error text does not name the key: %s", c.doc, err)
		}
	}
}

// TestProcessKeys: max_processes defaults to 128 running processes per sandbox and
// process_ring_bytes to 1 MiB per stream; both take a value within their bounds.
func TestProcessKeys(t *testing.T) {
	if d := Defaults(); d.MaxProcesses != 128 || d.ProcessRingBytes != 1<<20 {
		t.Fatalf("defaults %d %d", d.MaxProcesses, d.ProcessRingBytes)
	}
	s, _, err := ParseYAML([]byte("max_processes: 1024\nprocess_ring_bytes: 67108864\n"))
	if err != nil || s.MaxProcesses != 1024 || s.ProcessRingBytes != 64<<20 {
		t.Fatalf("%d %d %v", s.MaxProcesses, s.ProcessRingBytes, err)
	}
}

func TestWarmPool(t *testing.T) {
	s, _, err := ParseYAML([]byte("image_allowlist: [python, node, ghost]\nwarm_pool: 2\n"))
	if err != nil || len(s.WarmPool) != 2 || s.WarmPool["python"] != 2 || s.WarmPool["node"] != 2 {
		t.Fatalf("count for each allowlisted image: %v %v", s.WarmPool, err)
	}
	s, _, err = ParseYAML([]byte("image_allowlist: [python, node]\nwarm_pool: {python: 1, node: 0}\n"))
	if err != nil || len(s.WarmPool) != 1 || s.WarmPool["python"] != 1 {
		t.Fatalf("map: %v %v", s.WarmPool, err)
	}
	if s, _, err := ParseJSON([]byte(`{"image_allowlist":["python"]}`)); err != nil || len(s.WarmPool) != 0 {
		t.Fatalf("default: %v %v", s.WarmPool, err)
	}
}

func TestLoadFile(t *testing.T) {
	if _, _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("a missing file must fail")
	}
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("image_allowlist: [node]\nmax_concurrent_exec_per_sandbox: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, warnings, err := LoadFile(p)
	if err != nil || s.ImageAllowlist[0] != "node" || s.MaxConcurrentExecPerSandbox != 1 || len(warnings) != 1 {
		t.Fatalf("%+v %v %v", s, warnings, err)
	}
	if err := os.WriteFile(p, []byte("default_cpus: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadFile(p); err == nil || !strings.Contains(err.Error(), "YAML") {
		t.Fatalf("malformed YAML: %v", err)
	}
}

func TestSnapshotKeys(t *testing.T) {
	if d := Defaults(); d.Snapshots != SnapshotsOn || d.SnapshotCacheMB != DefaultSnapshotCacheMB {
		t.Fatalf("defaults: snapshots %q, snapshot_cache_mb %d", d.Snapshots, d.SnapshotCacheMB)
	}
	for _, v := range []any{"on", true} {
		s, _, err := Parse(map[string]any{"snapshots": v, "snapshot_cache_mb": 100})
		if err != nil || s.Snapshots != SnapshotsOn || s.SnapshotCacheMB != 100 {
			t.Fatalf("snapshots %v: %+v %v", v, s, err)
		}
	}
	if s, _, err := Parse(map[string]any{"snapshots": false}); err != nil || s.Snapshots != SnapshotsOff {
		t.Fatalf("snapshots false: %q %v", s.Snapshots, err)
	}
}

func TestGuestArchAndFileShareKeys(t *testing.T) {
	s, _, err := Parse(map[string]any{"guest_arch": "aarch64", "file_share": "9p"})
	if err != nil || s.GuestArch != "aarch64" || s.FileShare != Share9P {
		t.Fatalf("got %+v, %v", s, err)
	}
	for _, doc := range []map[string]any{{"guest_arch": "arm64"}, {"guest_arch": 1}, {"file_share": "nfs"}, {"file_share": true}} {
		if _, _, err := Parse(doc); err == nil {
			t.Errorf("%v accepted", doc)
		}
	}
	if d := Defaults(); d.GuestArch != "" || d.FileShare != DefaultFileShare(runtime.GOOS) {
		t.Fatalf("defaults: %+v", d)
	}
}

func TestGuest(t *testing.T) {
	for _, c := range []struct {
		guestArch, share, accel, goos, goarch string
		want, err                             string
	}{
		{"", ShareVirtiofs, AccelKVM, "linux", "amd64", "x86_64", ""},
		{"", ShareVirtiofs, AccelKVM, "linux", "arm64", "aarch64", ""},
		{"aarch64", ShareVirtiofs, AccelTCG, "linux", "amd64", "aarch64", ""},
		{"aarch64", Share9P, AccelAuto, "linux", "amd64", "aarch64", ""},
		{"aarch64", ShareVirtiofs, AccelKVM, "linux", "amd64", "", "`guest_arch`: aarch64 differs from this host's x86_64: such a guest runs only under software emulation; set `accelerator: tcg` (accelerator is kvm)"},
		{"x86_64", Share9P, AccelHVF, "darwin", "arm64", "", "runs only under software emulation"},
		{"", Share9P, AccelHVF, "darwin", "arm64", "aarch64", ""},
		{"", ShareVirtiofs, AccelHVF, "darwin", "arm64", "", "`file_share`: virtiofs needs virtiofsd, which does not exist on macOS; use 9p"},
		{"", Share9P, AccelKVM, "darwin", "arm64", "", "`accelerator`: kvm is Linux's"},
	} {
		s := Defaults()
		s.GuestArch, s.FileShare = c.guestArch, c.share
		a, err := s.Guest(c.accel, c.goos, c.goarch)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%+v: error %v, want %q", c, err, c.err)
		case c.err == "" && (err != nil || a.Name != c.want):
			t.Errorf("%+v: got %s, %v", c, a.Name, err)
		}
	}
}

// The configuration published with the adapter is valid settings, without warnings.
func TestPublishedDefaultsAreValid(t *testing.T) {
	st, warnings, err := ParseJSON(PublishedDefaults)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("published-defaults.json: %v, warnings %q", err, warnings)
	}
	if !slices.Equal(st.ImageAllowlist, []string{"python", "node"}) {
		t.Errorf("image_allowlist = %q, want the two presets", st.ImageAllowlist)
	}
}

// TestExposeKeys: exposed ports listen on loopback unless expose_host says otherwise.
func TestExposeKeys(t *testing.T) {
	d := Defaults()
	if d.ExposeHost != "127.0.0.1" || d.MaxExposedPorts != 8 || d.MaxExposeConnections != 64 {
		t.Fatalf("defaults %q %d %d", d.ExposeHost, d.MaxExposedPorts, d.MaxExposeConnections)
	}
}

// TestPerImageNetwork: per_image_network takes off, on or a policy per image, written in YAML as
// in JSON, and shows each as written.
func TestPerImageNetwork(t *testing.T) {
	s, _, err := ParseYAML([]byte(`
per_image_network:
  python: {allow: ["*.pypi.org:443", "10.0.0.0/8"], deny: [":25"]}
  node: off
  tools: on
`))
	if err != nil {
		t.Fatal(err)
	}
	py := s.PerImageNetwork["python"]
	if !py.On || py.Egress == nil || len(py.Egress.Allow) != 2 || len(py.Egress.Deny) != 1 || s.PerImageNetwork["node"].On || !s.PerImageNetwork["tools"].On {
		t.Fatalf("parsed %+v", s.PerImageNetwork)
	}
	b, err := json.Marshal(s.PerImageNetwork)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"node":"off","python":{"allow":["*.pypi.org:443","10.0.0.0/8"],"deny":[":25"]},"tools":"on"}`; string(b) != want {
		t.Fatalf("shown as %s, want %s", b, want)
	}
}
