// Command sandbox-libkrun is the sandbox adapter worker: it serves <prefix>::* for the engine's
// sandbox router and Compose's VM workers, and runs each sandbox in a microVM. It is a binary of
// its own, published to the worker registry; Compose installs it when a project needs it (req A3).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/base/procgroup"
	"github.com/iii-go/iii/sandbox-libkrun/adapter"
	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/hostcheck"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
	"github.com/iii-go/iii/sandbox-libkrun/vmworker"
)

// Environment variables the adapter reads (besides the SDK's III_URL, III_NAMESPACE,
// III_WORKER_NAME and III_TOKEN_FILE).
const (
	envPrefix     = "III_SANDBOX_PREFIX"      // function prefix
	envHostRoots  = "III_SANDBOX_HOST_ROOTS"  // extra VM-worker host roots, path-list separated
	envComposeDir = "III_COMPOSE_DIR"         // the compose file's directory (a host root)
	envComposeNS  = "III_COMPOSE_NAMESPACE"   // the project's namespace (names the settings entry)
	envConfigName = "III_CONFIG_NAME"         // the settings entry id, when Compose names it
	envConfigFile = "III_CONFIG"              // Compose's copy of the entry, read when the engine has none
	envAccel      = "III_SANDBOX_ACCELERATOR" // overrides the accelerator setting (kvm, tcg, auto)
)

const usage = `sandbox-libkrun: the sandbox adapter worker (sandbox contract %d.%d)

Usage: sandbox-libkrun [flags]

Connects to the engine at $III_URL (default ws://127.0.0.1:49134), registers <prefix>::* in
$III_NAMESPACE (default "default") and runs every sandbox and VM worker in a microVM.

Flags:
  --prefix NAME        function prefix (env III_SANDBOX_PREFIX; default sandbox-libkrun)
  --config FILE        read settings from a YAML/JSON file instead of the engine's
                       configuration worker (standalone use)
  --config-id ID       configuration entry to read (env III_CONFIG_NAME; default
                       <namespace>-sandbox-libkrun, namespace from III_COMPOSE_NAMESPACE,
                       else III_NAMESPACE). When the engine has no such entry, the file
                       named by III_CONFIG is read, else the package defaults apply.
  --compose-dir DIR    the compose file's directory, a host root whose .iii/ is never mounted
                       (env III_COMPOSE_DIR)
  --host-root DIR      a VM-worker host root; repeatable (env III_SANDBOX_HOST_ROOTS, a list
                       separated by %q). Compose's package cache is always a root.
  --check              validate settings and host, print the result, and exit
  --version            print the version and exit
  --help               this text

Environment: III_URL, III_NAMESPACE, III_WORKER_NAME, III_TOKEN_FILE (project token file) and
the variables named above.

Settings key warm_pool (default none): pre-booted machines per image, a map {image: count} or
one count for every allowlisted image (0-8 each, at most max_concurrent_sandboxes in all). A
create or run with the default cpus and memory and no network takes one at once and a
replacement boots behind it; pooled machines are not listed, do not count toward
max_concurrent_sandboxes and stop with the adapter. adapter::info shows warm_pool.<image>
{size, ready, booting, served, error}.

Settings key accelerator (default kvm on Linux, hvf on macOS): kvm needs read/write /dev/kvm;
hvf is macOS's Hypervisor.framework; tcg runs every VM under qemu's software emulation on any
host (slower; a warning at start says so); auto uses KVM (HVF) when usable, else tcg.
$III_SANDBOX_ACCELERATOR overrides the key.

Settings key guest_arch (default: the host's; x86_64 or aarch64): another architecture than the
host's runs only under tcg (auto means tcg then), from the firmware in ~/.iii/lib/<arch>/ and
the images in ~/.iii/cache/<arch>/. Settings key file_share (default virtiofs on Linux, 9p on
macOS): how the image and mounts reach the guest, virtiofsd or qemu's virtio-9p server.

At start the adapter installs the VM firmware it carries (firmware/ beside this binary, or
firmware-<arch>/ for an emulated guest_arch) into ~/.iii/lib when it is missing or older. Host
checks (each missing piece is its own error): qemu, virtiofsd (file_share virtiofs), read/write
/dev/kvm (accelerator kvm), Hypervisor.framework (hvf), libcap-ng0 (Linux), the VM firmware,
mkfs.ext4 (e2fsprogs, $III_MKFS) unless worker_disk_mb is 0.
Images are cached in ~/.iii/cache (pulled when auto_install is on), VM-worker state is kept in
~/.iii/sandbox/workers/<vm_id>/.

Functions: <prefix>::create exec run list stop catalog::list adapter::info
  fs::{ls,stat,mkdir,write,read,rm,chmod,mv,grep,sed} worker::{start,stop,status,delete}

worker::* serve Compose alone: they are protected functions, which the engine forwards only from
a connection holding this adapter's project token (III_TOKEN_FILE, which Compose sets) or
Compose's owner token of that project; anyone else gets FORBIDDEN, and an adapter started
without a token answers them FORBIDDEN itself. A VM worker never gets a directory at or inside a
.iii directory below its host root, nor anything of ~/.iii/engine (S001); its environment
values come from env_file, <token dir>/vm-env/<vm_id>.json (0600), not from the request.
`

type options struct {
	prefix, configFile, configID, composeDir string
	hostRoots                                []string
	check                                    bool
}

type multiFlag []string

// String lists the values given so far.
func (m *multiFlag) String() string { return strings.Join(*m, ",") }

// Set adds one value.
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

var _ flag.Value = (*multiFlag)(nil)

func main() {
	for _, a := range os.Args[1:] {
		if a == "--version" || a == "-V" {
			fmt.Println(version)
			return
		}
	}
	os.Exit(run(os.Args[1:]))
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, adapter.Name+": "+format+"\n", a...)
}

// parseFlags reads the command line; help is true when it printed the usage.
func parseFlags(args []string) (o options, help bool, err error) {
	var roots multiFlag
	fs := flag.NewFlagSet(adapter.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.prefix, "prefix", envOr(envPrefix, adapter.Name), "")
	fs.StringVar(&o.configFile, "config", "", "")
	fs.StringVar(&o.configID, "config-id", os.Getenv(envConfigName), "")
	fs.StringVar(&o.composeDir, "compose-dir", os.Getenv(envComposeDir), "")
	fs.Var(&roots, "host-root", "")
	fs.BoolVar(&o.check, "check", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Printf(usage, adapter.Contract.Major, adapter.Contract.Minor, string(os.PathListSeparator))
			return o, true, nil
		}
		return o, false, errcode.Usagef(errcode.Usage, "%w (see sandbox-libkrun --help)", err)
	}
	if fs.NArg() > 0 {
		return o, false, errcode.Usagef(errcode.Usage, "unexpected argument %q (see sandbox-libkrun --help)", fs.Arg(0))
	}
	if o.prefix == "" || strings.ContainsAny(o.prefix, " \t:") {
		return o, false, errcode.Usagef(errcode.Usage, "--prefix must be a non-empty name without spaces or colons, got %q", o.prefix)
	}
	o.hostRoots = roots
	for _, r := range filepath.SplitList(os.Getenv(envHostRoots)) {
		if r != "" {
			o.hostRoots = append(o.hostRoots, r)
		}
	}
	return o, false, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// run is the adapter process: it returns the exit status, printing error[CODE]: message first
// when it could not start.
func run(args []string) int {
	status, err := serve(args)
	if err != nil {
		return errcode.Exit(os.Stderr, err, errcode.Unknown)
	}
	return status
}

func serve(args []string) (int, error) {
	o, help, err := parseFlags(args)
	if help || err != nil {
		return 0, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// The worker connects only once every function is registered, so that Compose, which waits
	// for it to register, never finds it without them. Its settings are read before, over a
	// connection of their own.
	w := protocol.NewWorker(protocol.Config{
		Name:        envOr(protocol.EnvWorkerName, adapter.Name),
		Description: "sandbox adapter: runs sandboxes and VM workers in microVMs",
		Version:     version,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}.FromEnv(os.Getenv))
	defer w.Close()

	st, err := loadSettings(ctx, w, o)
	if err != nil {
		if errcode.CodeOf(err) == errcode.EngineUnreachable {
			return 0, err
		}
		return 0, errcode.New(errcode.InvalidSettings, "%w; the adapter does not start with a bad value (fix it in the adapter's config_override, then run `iii call compose::restart`)", err)
	}
	vms, err := prepareHost(st)
	if err != nil {
		return 0, err
	}
	if o.check {
		fmt.Printf("settings ok; VM driver %s; host roots %s\n", vms.drv.Name(), strings.Join(hostRoots(o).List(), ", "))
		return 0, nil
	}
	return runAdapter(ctx, w, o, st, vms)
}

// vmHost is the checked host's VM driver, guest architecture and the accelerator in use.
type vmHost struct {
	drv   *qemu.Driver
	arch  guestarch.Arch
	inUse string
}

// prepareHost picks the accelerator and guest architecture, installs the firmware, checks the
// host and makes the VM driver, warning when the VMs will run under software emulation.
func prepareHost(st settings.Settings) (vmHost, error) {
	accel, err := accelerator(st)
	if err != nil {
		return vmHost{}, errcode.New(errcode.InvalidSettings, "%w", err)
	}
	arch, err := st.Guest(accel, runtime.GOOS, runtime.GOARCH)
	if err != nil {
		return vmHost{}, errcode.New(errcode.InvalidSettings, "%w", err)
	}
	if p := hostcheck.Platform(platform.Host(os.Getenv)); p != nil {
		return vmHost{}, errcode.New(errcode.UnsupportedPlatform, "%s", p.Message)
	}
	if err := installFirmware(arch); err != nil {
		return vmHost{}, errcode.New(errcode.FirmwareInstallFailed, "%w", err)
	}
	problems := hostcheck.Run(hostcheck.Config{Accel: accel, Arch: arch, Share: st.FileShare, Getenv: os.Getenv, StateDisk: st.WorkerDiskMB > 0})
	for _, p := range problems {
		if !p.Fatal {
			logf("warning: %s", p)
		}
	}
	if err := hostcheck.Err(problems); err != nil {
		return vmHost{}, errcode.New(errcode.HostCheckFailed, "%w", err)
	}
	drv, err := qemu.New(qemu.Options{Accel: accel, Arch: arch, Share: st.FileShare,
		Qemu: os.Getenv("III_QEMU"), Virtiofsd: os.Getenv("III_VIRTIOFSD"), KVMDevice: os.Getenv("III_KVM_DEVICE"), Getenv: os.Getenv})
	if err != nil {
		return vmHost{}, errcode.New(errcode.HostCheckFailed, "%w", err)
	}
	inUse := drv.Accel()
	switch {
	case !arch.Native():
		logf("warning: guest_arch %s: every VM is an emulated %s machine under software emulation (tcg), several times slower than a native guest", arch.Name, arch.Name)
	case accel == settings.AccelTCG:
		logf("warning: accelerator tcg: every VM runs under software emulation (no KVM), several times slower than under kvm")
	case accel == settings.AccelAuto:
		logf("accelerator auto: using %s", drv.AccelChoice())
	}
	return vmHost{drv, arch, inUse}, nil
}

// snapshotStore is the snapshot store of settings st and the identity of the firmware of arch in
// its keys; nil with snapshots off, or (logged) when the firmware cannot boot a snapshot machine.
func snapshotStore(st settings.Settings, arch guestarch.Arch) (*snapshot.Store, string) {
	if st.Snapshots != settings.SnapshotsOn {
		return nil, ""
	}
	p, err := firmware.LocateFor(os.Getenv, arch)
	var man firmware.Manifest
	if err == nil {
		man, err = firmware.ReadManifest(p)
	}
	if err == nil && !man.Serves(firmware.ShareBlock) {
		err = fmt.Errorf("the firmware in %s has no virtio-blk root (rebuild it with `go tool mage firmware`)", p.Dir)
	}
	if err != nil {
		logf("warning: snapshots: off: %v", err)
		return nil, ""
	}
	dir := snapshot.DefaultDir()
	if arch.Name != guestarch.Host().Name {
		dir = filepath.Join(dir, arch.Name)
	}
	logf("snapshots: on, in %s (at most %d MiB)", dir, st.SnapshotCacheMB)
	return snapshot.NewStore(dir, int64(st.SnapshotCacheMB)), man.SHA256[firmware.KernelFile] + "+" + man.SHA256[firmware.InitrdFile]
}

// runAdapter serves <prefix>::* on w until ctx ends or the engine connection does, then stops
// every VM. It returns the exit status: 1 when the engine connection failed.
func runAdapter(ctx context.Context, w *protocol.Worker, o options, st settings.Settings, vms vmHost) (int, error) {
	drv, arch := vms.drv, vms.arch
	warnPoolMemory(st)
	// Images of an emulated guest architecture live apart (image.DirFor).
	images := cacheImages{c: image.NewCacheFor(image.DirFor(image.DefaultDir(os.Getenv), arch), arch)}
	runDir := processDir("iii-sbx")
	defer os.RemoveAll(runDir)
	snaps, fwID := snapshotStore(st, arch)
	// The snapshots of running sandboxes live beside the image snapshots, never among them.
	userSnaps := filepath.Join(filepath.Dir(snapshot.DefaultDir()), "user-snapshots")
	if arch.Name != guestarch.Host().Name {
		userSnaps = filepath.Join(userSnaps, arch.Name)
	}
	svc := adapter.New(adapter.Options{Settings: st, Driver: drv, Images: images, Version: version, Accelerator: vms.inUse, GuestArch: arch.Name,
		StateDir: filepath.Join(runDir, "s"), Logf: logf, Channels: w, Snapshots: snaps, FirmwareID: fwID, UserSnapshotDir: userSnaps})
	roots := hostRoots(o)
	workers := vmworker.New(vmworker.Options{
		Driver: drv, Images: images, AutoInstall: st.AutoInstall, Roots: roots, ComposeDir: o.composeDir,
		TokenFile: os.Getenv(protocol.EnvTokenFile), Env: os.Environ(),
		EngineURL: envOr(protocol.EnvURL, protocol.DefaultURL),
		RunDir:    filepath.Join(runDir, "w"),
		CPUs:      int(st.DefaultCPUs), MemoryMB: int(st.DefaultMemoryMB), DiskMB: int(st.WorkerDiskMB), Logf: logf,
	})
	if err := register(ctx, w, o.prefix, svc, workers); err != nil {
		return 0, err
	}
	logf("serving %s::* in namespace %s (version %s, driver %s, host roots: %s)",
		o.prefix, w.Namespace(), version, drv.Name(), strings.Join(roots.List(), ", "))

	reapCtx, stopReaper := context.WithCancel(ctx)
	go svc.RunReaper(reapCtx, adapter.ReapInterval)
	status := awaitEnd(ctx, w)
	stopReaper()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	workers.Shutdown(sctx)
	svc.Shutdown(sctx)
	return status, nil
}

// register registers every sandbox and VM-worker function as prefix::op, then connects w to
// the engine within 30 seconds.
func register(ctx context.Context, w *protocol.Worker, prefix string, svc *adapter.Service, workers *vmworker.Manager) error {
	handlers := svc.Handlers()
	for op, h := range handlers {
		if err := w.Register(prefix+"::"+op, wrap(h), protocol.WithDescription(describe(op))); err != nil {
			return errcode.New(errcode.RegisterFailed, "%s::%s: %w", prefix, op, err)
		}
	}
	// worker::* boot VMs with host directories inside and delete their state: only Compose may
	// drive them. They are protected functions, so the engine forwards a call only from a
	// connection holding this adapter's token (the project token Compose hands it) or Compose's
	// owner token of the same project; any other caller (another local user, a sandbox guest, a
	// local process without the token) gets FORBIDDEN. An adapter started without a token has
	// nobody to admit, so it answers every worker::* call FORBIDDEN itself.
	withToken := os.Getenv(protocol.EnvTokenFile) != "" || os.Getenv(protocol.EnvToken) != ""
	for op, h := range workers.Handlers() {
		fn := wrap(adapter.Handler(h))
		opts := []protocol.FuncOption{protocol.WithDescription(describe(op))}
		if withToken {
			opts = append(opts, protocol.Protected())
		} else {
			fn = refuseWithoutToken(prefix + "::" + op)
		}
		if err := w.Register(prefix+"::"+op, fn, opts...); err != nil {
			return errcode.New(errcode.RegisterFailed, "%s::%s: %w", prefix, op, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := w.Start(cctx)
	cancel()
	if err != nil {
		return errcode.New(errcode.EngineUnreachable, "cannot register with the engine at %s: %w", w.URL(), err)
	}
	return nil
}

// awaitEnd waits for a stop signal (ctx) or the end of the engine connection and returns the
// exit status: 1 when the connection ended with an error.
func awaitEnd(ctx context.Context, w *protocol.Worker) int {
	select {
	case <-ctx.Done():
		logf("stopping every VM")
	case <-w.Done():
		if err := w.Err(); err != nil {
			logf("engine connection ended: %v; stopping every VM", err)
			return 1
		}
	}
	return 0
}

var descriptions = map[string]string{
	"create":           "Boot a sandbox microVM from a catalog image: image, cpus?, memory_mb?, name?, network?, idle_timeout_secs?, env?; or restore a copy of a snapshot: snapshot_id, name?, idle_timeout_secs?",
	"exec":             "Run a command in a sandbox: sandbox_id, cmd/args or argv, stdin (base64)?, env?, timeout_ms?, workdir?",
	"run":              "Create a sandbox, write the code (and files), run it with lang's interpreter, stop: image, lang, code, files?, env?, stdin?, timeout_ms?, keep_sandbox?",
	"list":             "List sandboxes with their exec slots",
	"stop":             "Stop a sandbox: sandbox_id, wait?",
	"catalog::list":    "List the catalog images (presets, then custom_images)",
	"adapter::info":    "The adapter's name, version and sandbox contract",
	"process::start":   "Start a process in a sandbox, its output streamed on channels: sandbox_id, cmd/args or argv, env?, workdir?, timeout_ms?, stdin?, tty? {rows, cols}, detached?",
	"process::attach":  "Attach to a sandbox process again: its missed output (from its ring), then live output and its exit: sandbox_id, process_id, stdin?",
	"process::list":    "List the processes of a sandbox: sandbox_id",
	"process::wait":    "Wait until a sandbox process exits: sandbox_id, process_id, timeout_ms?",
	"process::signal":  "Send a signal to a sandbox process's group: sandbox_id, process_id, signal (SIGTERM, TERM or 1..64)",
	"process::resize":  "Resize a sandbox process's terminal: sandbox_id, process_id, rows, cols",
	"expose":           "Expose a guest TCP port on a host URL (loopback unless expose_host says otherwise), closed with the sandbox: sandbox_id, port, token?",
	"unexpose":         "Close an exposed port of a sandbox and its connections: sandbox_id, port",
	"expose::list":     "List the exposed ports of a sandbox: sandbox_id",
	"snapshot":         "Save a running sandbox (its files, memory and processes; it goes on) as a snapshot: sandbox_id, name?",
	"snapshot::list":   "List the snapshots of running sandboxes, their sizes and the user_snapshots_mb bound",
	"snapshot::delete": "Delete a snapshot: snapshot_id",
	"fork":             "Start count copies of a running sandbox that go on from its state (it goes on too): sandbox_id, count?",
	"pause":            "Pause a sandbox: its machine saved to files and ended (no CPU, no RAM) until resume or any other call: sandbox_id",
	"resume":           "Resume a paused sandbox under its id, its processes and files as they were: sandbox_id",
	"worker::start":    "Boot a Compose VM worker (Compose only): vm_id, image, dir, command, env?, env_file?, name?, guest_dir?, cpus?, memory_mb?, network?, mounts?",
	"worker::stop":     "Stop a Compose VM worker (Compose only): vm_id",
	"worker::status":   "State of one VM worker (vm_id) or of all, with the host roots (Compose only)",
	"worker::delete":   "Stop a VM worker and remove ~/.iii/sandbox/workers/<vm_id>/ (Compose only): vm_id",
}

// describe is the function description shown by engine::functions::list.
func describe(op string) string {
	if d, ok := descriptions[op]; ok {
		return d
	}
	return "Filesystem operation " + op + " inside a sandbox: sandbox_id plus its fields"
}

// refuseWithoutToken answers every call of fn FORBIDDEN: an adapter that holds no project token
// cannot tell Compose from any other caller, so it serves VM workers to nobody.
func refuseWithoutToken(fn string) protocol.Handler {
	return func(context.Context, json.RawMessage) (any, error) {
		return nil, protocol.NewError(errcode.Forbidden, "%s serves only Compose, and this adapter was started without a project token "+
			"($%s), so it cannot tell Compose from any other caller: start it through Compose (iii compose --up), "+
			"or with %s naming the project token file", fn, protocol.EnvTokenFile, protocol.EnvTokenFile)
	}
}

// wrap turns an S-code error into the wire error whose body is the envelope itself.
func wrap(h adapter.Handler) protocol.Handler {
	return func(ctx context.Context, in json.RawMessage) (any, error) {
		out, err := h(ctx, in)
		if err != nil {
			if e, ok := scode.As(err); ok {
				return nil, protocol.RawError(e.JSON())
			}
			return nil, err
		}
		return out, nil
	}
}

// accelerator is the accelerator setting, or $III_SANDBOX_ACCELERATOR when set (validated the
// same way).
func accelerator(st settings.Settings) (string, error) {
	v := os.Getenv(envAccel)
	if v == "" {
		return st.Accelerator, nil
	}
	if !slices.Contains(settings.Accelerators, v) {
		return "", fmt.Errorf("$%s must be one of %s, got %q", envAccel, strings.Join(settings.Accelerators, ", "), v)
	}
	return v, nil
}

// installFirmware installs the firmware of guest architecture arch this adapter carries into its
// firmware directory (~/.iii/lib, or ~/.iii/lib/<arch> for an emulated one) when it is missing
// or older, and says what it did. An adapter that carries none (a bare `go build`) relies on
// what is installed.
func installFirmware(arch guestarch.Arch) error {
	src, ok := firmware.BundledFor(arch)
	if !ok {
		return nil
	}
	dst := firmware.At(firmware.DirFor(os.Getenv, arch))
	action, err := firmware.Install(src, dst, version)
	if err != nil {
		return err
	}
	switch action {
	case firmware.Installed, firmware.Replaced:
		logf("VM firmware %s into %s", action, dst.Dir)
	case firmware.Kept:
		if m, err := firmware.ReadManifest(dst); err != nil || m.Agent != proto.AgentVersion {
			logf("warning: the VM firmware in %s was not installed by sandbox-libkrun and may not suit this adapter (guest agent %q, this adapter speaks %q); remove its iii-vm-* files to let the adapter install its own", dst.Dir, m.Agent, proto.AgentVersion)
		}
	}
	return nil
}

// processDir returns $TMPDIR/<name>-<uid>/<pid>, the directory of this process's machine
// sockets and console logs, after removing those left by adapter processes that no longer run
// (a killed adapter cannot clean up; its VMs died with it).
func processDir(name string) string {
	root := filepath.Join(os.TempDir(), fmt.Sprintf("%s-%d", name, os.Getuid()))
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if !procgroup.Alive(pid) {
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
	return filepath.Join(root, strconv.Itoa(os.Getpid()))
}

// hostRoots are the VM-worker roots: the compose directory, Compose's package cache and every
// root given by flag or environment.
func hostRoots(o options) vmworker.Roots {
	dirs := []string{}
	if o.composeDir != "" {
		dirs = append(dirs, o.composeDir)
	}
	dirs = append(dirs, vmworker.PackageCache(os.Getenv("III_COMPOSE_STATE_DIR")))
	dirs = append(dirs, o.hostRoots...)
	return vmworker.NewRoots(dirs)
}

// loadSettings reads the settings from --config, else from the configuration worker's entry
// <namespace>-sandbox-libkrun over a short connection of its own (named after w, with
// "/settings"); an iii-sandbox entry is never read (req C4). A missing entry means the package
// defaults.
func loadSettings(ctx context.Context, w *protocol.Worker, o options) (settings.Settings, error) {
	var (
		st       settings.Settings
		warnings []string
		err      error
	)
	if o.configFile != "" {
		st, warnings, err = settings.LoadFile(o.configFile)
	} else {
		id := o.configID
		if id == "" {
			id = envOr(envComposeNS, w.Namespace()) + "-" + adapter.Name
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		conn, cerr := protocol.Connect(cctx, protocol.Config{Name: envOr(protocol.EnvWorkerName, adapter.Name) + "/settings",
			Description: "sandbox adapter: reading its settings", Version: version,
			Logger: slog.New(slog.DiscardHandler)}.FromEnv(os.Getenv))
		cancel()
		if cerr != nil {
			return settings.Defaults(), errcode.New(errcode.EngineUnreachable, "cannot reach the engine at %s to read the settings entry %q: %w", w.URL(), id, cerr)
		}
		st, warnings, err = fetchSettings(ctx, conn, id)
		conn.Close()
	}
	for _, msg := range warnings {
		logf("warning: %s", msg)
	}
	return st, err
}

func fetchSettings(ctx context.Context, w *protocol.Worker, id string) (settings.Settings, []string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// published_only: an entry anyone registered under this id is never taken as settings.
	raw, err := w.Call(cctx, "configuration::get", map[string]any{"id": id, "published_only": true})
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == errcode.NotFound {
			// An engine Compose does not own cannot take a published entry; Compose still
			// hands the layered value over as a file.
			if file := os.Getenv(envConfigFile); file != "" {
				logf("no configuration entry %q: reading %s", id, file)
				return settings.LoadFile(file)
			}
			logf("no configuration entry %q: using the package defaults", id)
			return settings.Parse(nil)
		}
		return settings.Defaults(), nil, fmt.Errorf("reading configuration entry %q: %w", id, err)
	}
	var reply struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return settings.Defaults(), nil, fmt.Errorf("configuration entry %q: %w", id, err)
	}
	if len(reply.Value) == 0 || string(reply.Value) == "null" {
		return settings.Parse(nil)
	}
	st, warnings, err := settings.ParseJSON(reply.Value)
	if err != nil {
		return st, warnings, fmt.Errorf("configuration entry %q: %w", id, err)
	}
	return st, warnings, nil
}

// warnPoolMemory logs the warm pool and warns when its guest RAM (default_memory_mb per
// machine, allocated by the guest as it touches it) exceeds half of the host's available memory.
func warnPoolMemory(st settings.Settings) {
	if len(st.WarmPool) == 0 {
		return
	}
	var parts []string
	total := 0
	for _, name := range slices.Sorted(maps.Keys(st.WarmPool)) {
		parts = append(parts, fmt.Sprintf("%s×%d", name, st.WarmPool[name]))
		total += int(st.WarmPool[name])
	}
	mb := total * int(st.DefaultMemoryMB)
	logf("warm pool: %s, up to %d MiB of guest RAM", strings.Join(parts, ", "), mb)
	if avail := memAvailableMB(); avail > 0 && mb > avail/2 {
		logf("warning: the warm pool may use %d MiB, more than half of the %d MiB available; lower warm_pool or default_memory_mb", mb, avail)
	}
}

// memAvailableMB reads MemAvailable from /proc/meminfo, 0 when unknown.
func memAvailableMB() int {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return 0
}

// cacheImages resolves images through the rootfs cache in ~/.iii/cache/, pulling on a miss when
// auto_install is on (req J3).
type cacheImages struct{ c *image.Cache }

// cacheImages serves both the sandboxes and the VM workers; the worker connection carries the
// adapter's stream channels; the qemu driver runs both.
var (
	_ adapter.Images   = cacheImages{}
	_ vmworker.Images  = cacheImages{}
	_ adapter.Channels = (*protocol.Worker)(nil)
	_ vm.Driver        = (*qemu.Driver)(nil)
)

// pullTimeout bounds one image pull.
const pullTimeout = 10 * time.Minute

// Resolve returns the cached root filesystem of ref, pulling it first when allowed.
func (ci cacheImages) Resolve(ctx context.Context, _, ref string, autoInstall bool) (string, error) {
	if p, ok := ci.c.RootFS(ref); ok {
		return p, nil
	}
	if !autoInstall {
		return "", adapter.ErrNotCached
	}
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	return ci.c.Pull(ctx, ref, func(line string) { logf("%s", line) })
}
