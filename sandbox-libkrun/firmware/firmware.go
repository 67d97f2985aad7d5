// Package firmware builds, carries and locates what the VM driver boots, per guest architecture:
// an uncompressed kernel taken from a Debian kernel package (the ELF vmlinux inside x86_64's
// bzImage, aarch64's Image) and an initramfs holding the guest agent as /init plus the kernel
// modules it loads.
//
// mage builds the firmware into dist/firmware/<target>/; every adapter package carries its
// target's in firmware/ beside the sandbox-libkrun binary, and the adapter installs it into
// ~/.iii/lib/ at start (Install), where the driver loads it (req J3). The firmware of a guest
// architecture other than the host's (run under emulation) is carried in firmware-<arch>/ and
// installed into ~/.iii/lib/<arch>/.
package firmware

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/iii-go/iii/internal/base/hostreq"
	"github.com/iii-go/iii/internal/base/iiidir"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// File names inside a firmware directory (the two the host checks look for are hostreq's).
const (
	KernelFile   = hostreq.KernelFile
	InitrdFile   = hostreq.InitrdFile
	ManifestFile = "iii-vm-firmware.json"
)

// BundleDir is the directory beside the adapter binary that holds the firmware it carries.
const BundleDir = "firmware"

// Modules are the kernel modules the guest loads at boot (their dependencies are added).
var Modules = []string{"virtio_mmio", "virtio_console", "virtiofs", "overlay"}

// NetModules are loaded only when a machine has networking.
var NetModules = []string{"virtio_net"}

// DiskModules are loaded only when a machine has a state disk (a VM worker's persistent upper
// layer): the virtio block driver and ext4, with crc32c first (ext4 asks the crypto API for it
// and the guest has no modprobe). A kernel that builds one in (modules.builtin) carries no file.
var DiskModules = []string{"crc32c_generic", "virtio_blk", "ext4"}

// NinePModules are loaded only when a machine's files are shared over virtio-9p (macOS, and the
// share_mode 9p on Linux). A kernel without them (Debian's cloud kernels) gives a firmware that
// serves virtiofs only.
var NinePModules = []string{"9pnet_virtio", "9p"}

// BlockModules are loaded only when the root is a read-only ext4 image on virtio-blk (machines
// that are snapshotted; ext4 itself is built into the kernels used).
var BlockModules = []string{"virtio_blk"}

// The file shares a firmware's guest can mount, as listed in Manifest.Shares.
const (
	ShareVirtiofs = vm.ShareVirtiofs
	Share9P       = vm.Share9P
	ShareBlock    = proto.ShareBlock // the root as a read-only ext4 image on virtio-blk (snapshots)
)

// Manifest describes a firmware: what it was built from and the SHA-256 of its two files.
// InstalledBy is set only in ~/.iii/lib, by the adapter version that installed it there.
type Manifest struct {
	KernelRelease string            `json:"kernel_release"`
	Arch          string            `json:"arch,omitempty"` // guest architecture (uname -m); empty: x86_64
	Shares        []string          `json:"shares,omitempty"`
	Package       string            `json:"package"`
	Agent         string            `json:"agent"`
	Modules       []string          `json:"modules"`
	SHA256        map[string]string `json:"sha256"`
	InstalledBy   string            `json:"installed_by,omitempty"`
}

// Paths are the files of a firmware directory.
type Paths struct {
	Dir      string
	Kernel   string
	Initrd   string
	Manifest string
}

// Dir is the firmware directory: $III_LIB_DIR of getenv (the caller's environment, os.Getenv in a
// main; nil is an empty one), else ~/.iii/lib (HOME honoured).
func Dir(getenv func(string) string) string { return iiidir.Env{Getenv: getenv}.Lib() }

// DirFor is the firmware directory of guest architecture a: Dir(getenv) for the host's, else its
// subdirectory <arch>.
func DirFor(getenv func(string) string, a guestarch.Arch) string {
	if a.Native() {
		return Dir(getenv)
	}
	return filepath.Join(Dir(getenv), a.Name)
}

// BundleDirFor is the directory beside the adapter binary that carries the firmware of guest
// architecture a: firmware/ for the host's, firmware-<arch>/ for another.
func BundleDirFor(a guestarch.Arch) string {
	if a.Native() {
		return BundleDir
	}
	return BundleDir + "-" + a.Name
}

// ArchOf is the guest architecture a manifest names (x86_64 when it names none: firmware built
// before manifests carried one).
func (m Manifest) ArchOf() string {
	if m.Arch == "" {
		return guestarch.X86_64.Name
	}
	return m.Arch
}

// Serves reports whether the firmware's guest can mount a share of the given kind.
func (m Manifest) Serves(share string) bool {
	if len(m.Shares) == 0 {
		return share == ShareVirtiofs
	}
	return slices.Contains(m.Shares, share)
}

// At returns the firmware paths inside dir.
func At(dir string) Paths {
	return Paths{Dir: dir, Kernel: filepath.Join(dir, KernelFile), Initrd: filepath.Join(dir, InitrdFile), Manifest: filepath.Join(dir, ManifestFile)}
}

// LocateFor returns the installed firmware of guest architecture a (DirFor(getenv, a)), or the
// host check's error.
func LocateFor(getenv func(string) string, a guestarch.Arch) (Paths, error) {
	p := At(DirFor(getenv, a))
	if pr := hostreq.Firmware(p.Dir); pr != nil {
		return p, errors.New(pr.String())
	}
	return p, nil
}

// ReadManifest reads the manifest of the firmware directory p.
func ReadManifest(p Paths) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(p.Manifest)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", p.Manifest, err)
	}
	return m, nil
}

// Options steer Build.
type Options struct {
	WorkDir   string         // scratch directory for the download and extraction (required)
	OutDir    string         // where the firmware files go (required)
	Arch      guestarch.Arch // guest architecture (default: the host's)
	Package   string         // Debian kernel package (default Arch.KernelPackage)
	Agent     string         // path of a built guest agent; empty: build it from ModuleDir
	ModuleDir string         // the sandbox-libkrun module directory, to build the agent
	// Env is the environment go build of the agent runs in, KEY=VALUE (os.Environ() in
	// iii-vmbuild's main: the go tool needs its GOCACHE, HOME and PATH); required to build it.
	Env []string
	Log io.Writer // progress lines; nil discards
}

// Build downloads the kernel package with apt-get, extracts the uncompressed kernel and the
// needed modules, builds the guest agent and writes the firmware files. The output depends only
// on the package and the agent's source, so two builds give the same bytes.
func Build(ctx context.Context, o Options) (Paths, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Paths{}, err
	}
	deb, err := downloadKernelDeb(ctx, o.WorkDir, o.Package, o.Arch.Debian)
	if err != nil {
		return Paths{}, err
	}
	o.logf("firmware: kernel package %s", filepath.Base(deb))
	// Concurrent builds may share WorkDir (the download cache); each extracts on its own.
	root, err := os.MkdirTemp(o.WorkDir, "kernel-root-")
	if err != nil {
		return Paths{}, err
	}
	defer os.RemoveAll(root)
	release, vmlinux, err := extractKernel(ctx, o.Arch, deb, root)
	if err != nil {
		return Paths{}, err
	}
	sets, err := moduleSetsOf(filepath.Join(root, "lib", "modules", release))
	if err != nil {
		return Paths{}, err
	}
	if sets.ninePErr != nil {
		o.logf("firmware: %s has no 9p (%v): this firmware serves virtiofs only", filepath.Base(deb), sets.ninePErr)
	}
	if sets.blockErr != nil {
		o.logf("firmware: %s has no virtio-blk (%v): machines of this firmware cannot be snapshotted", filepath.Base(deb), sets.blockErr)
	}
	agent := o.Agent
	if agent == "" {
		agent = filepath.Join(root, "init")
		if err := BuildAgent(ctx, o.Env, o.ModuleDir, o.Arch.GOARCH, agent); err != nil {
			return Paths{}, err
		}
	}
	initrd, err := Initramfs(agent, sets.boot, sets.net, sets.disk, sets.nineP, sets.block)
	if err != nil {
		return Paths{}, err
	}
	man := Manifest{KernelRelease: release, Arch: o.Arch.Name, Shares: sets.shares(), Package: filepath.Base(deb), Agent: proto.AgentVersion,
		SHA256: map[string]string{KernelFile: digest(vmlinux), InitrdFile: digest(initrd)}}
	for _, m := range slices.Concat(sets.boot, sets.net, sets.disk, sets.nineP, sets.block) {
		man.Modules = append(man.Modules, m.Name)
	}
	if err := writeFirmware(o.OutDir, vmlinux, initrd, man); err != nil {
		return Paths{}, err
	}
	o.logf("firmware: kernel %s (%d MB), initramfs %d KB with %d modules, in %s", release, len(vmlinux)>>20, len(initrd)>>10, len(man.Modules), o.OutDir)
	return At(o.OutDir), nil
}

// withDefaults checks the required options, fills the defaults and creates WorkDir.
func (o Options) withDefaults() (Options, error) {
	if o.WorkDir == "" || o.OutDir == "" {
		return o, errors.New("firmware: WorkDir and OutDir are required")
	}
	if o.Arch.Name == "" {
		o.Arch = guestarch.Host()
	}
	if o.Package == "" {
		o.Package = o.Arch.KernelPackage
	}
	return o, os.MkdirAll(o.WorkDir, 0o755)
}

// logf writes one progress line to o.Log, if any.
func (o Options) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", a...)
	}
}

// extractKernel unpacks the kernel package deb into root and returns the kernel release and the
// uncompressed kernel image.
func extractKernel(ctx context.Context, arch guestarch.Arch, deb, root string) (string, []byte, error) {
	if err := run(ctx, "", "dpkg-deb", "-x", deb, root); err != nil {
		return "", nil, err
	}
	vmlinuzs, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(vmlinuzs) != 1 {
		return "", nil, fmt.Errorf("firmware: expected one boot/vmlinuz-* in %s, found %d", deb, len(vmlinuzs))
	}
	release := strings.TrimPrefix(filepath.Base(vmlinuzs[0]), "vmlinuz-")
	bz, err := os.ReadFile(vmlinuzs[0])
	if err != nil {
		return "", nil, err
	}
	vmlinux, err := kernelImage(arch, bz)
	return release, vmlinux, err
}

// moduleSets are the kernel modules the initramfs carries, each set in load order after the
// ones before it: loaded at boot, for networking, for 9p file sharing (none when the kernel
// has no 9p, with the reason in ninePErr) and for a root on virtio-blk (none when the kernel has
// no virtio_blk module, with the reason in blockErr).
type moduleSets struct {
	boot, net, disk, nineP, block []Module
	ninePErr, blockErr            error
}

// moduleSetsOf resolves the module sets from the modules directory of one kernel release.
func moduleSetsOf(dir string) (moduleSets, error) {
	var s moduleSets
	idx, err := ScanModules(dir)
	if err != nil {
		return s, err
	}
	if s.boot, err = LoadOrder(idx, Modules); err != nil {
		return s, err
	}
	withNet, err := LoadOrder(idx, slices.Concat(Modules, NetModules))
	if err != nil {
		return s, err
	}
	s.net = withNet[len(s.boot):]
	builtin, err := readBuiltin(dir)
	if err != nil {
		return s, err
	}
	withDisk, err := LoadOrder(idx, slices.Concat(Modules, notBuiltin(DiskModules, builtin)))
	if err != nil {
		return s, err
	}
	s.disk = withDisk[len(s.boot):]
	if with9P, err := LoadOrder(idx, slices.Concat(Modules, NinePModules)); err == nil {
		s.nineP = with9P[len(s.boot):]
	} else {
		s.ninePErr = err
	}
	if withBlock, err := LoadOrder(idx, slices.Concat(Modules, BlockModules)); err == nil {
		s.block = withBlock[len(s.boot):]
	} else {
		s.blockErr = err
	}
	return s, nil
}

// shares lists the file shares the firmware serves: virtiofs always, 9p and a block root when it
// has their modules.
func (s moduleSets) shares() []string {
	sh := []string{ShareVirtiofs}
	if s.ninePErr == nil {
		sh = append(sh, Share9P)
	}
	if s.blockErr == nil {
		sh = append(sh, ShareBlock)
	}
	return sh
}

// writeFirmware writes the kernel, the initramfs and then the manifest into dir, each atomically.
func writeFirmware(dir string, vmlinux, initrd []byte, man Manifest) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range map[string][]byte{KernelFile: vmlinux, InitrdFile: initrd} {
		if err := writeAtomic(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return writeManifest(At(dir), man)
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func writeManifest(p Paths, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(p.Manifest, append(b, '\n'), 0o644)
}

// Initramfs builds the uncompressed cpio archive: /init (the agent), the module files under
// /lib/modules with their load order in /lib/modules/order (at boot), /lib/modules/order.net
// (when networking is on), /lib/modules/order.disk (with a state disk), /lib/modules/order.9p
// (when files are shared over 9p), /lib/modules/order.blk (when the root is on virtio-blk), and
// /dev/console for init's stdio.
func Initramfs(agent string, mods, netMods, diskMods, ninePMods, blockMods []Module) ([]byte, error) {
	init, err := os.ReadFile(agent)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	for _, d := range []string{"dev", "proc", "sys", "lib", "lib/modules", "lower", "scratch", "newroot"} {
		c.Dir(d)
	}
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("init", 0o755, init)
	for _, set := range []struct {
		order string
		mods  []Module
	}{{"order", mods}, {"order.net", netMods}, {"order.disk", diskMods}, {"order.9p", ninePMods}, {"order.blk", blockMods}} {
		var order strings.Builder
		for _, m := range set.mods {
			data, err := os.ReadFile(m.Path)
			if err != nil {
				return nil, err
			}
			name := m.Name + ".ko"
			c.File("lib/modules/"+name, 0o644, HideUnwindTables(StripSignature(data)))
			order.WriteString(name + "\n")
		}
		c.File("lib/modules/"+set.order, 0o644, []byte(order.String()))
	}
	if err := c.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BuildAgent compiles the static guest agent (package guest of moduleDir) for Go architecture
// goarch, running go build in the environment env (the caller's; required).
func BuildAgent(ctx context.Context, env []string, moduleDir, goarch, out string) error {
	if moduleDir == "" {
		return errors.New("firmware: ModuleDir (the sandbox-libkrun module) is required to build the agent")
	}
	if env == nil {
		return errors.New("firmware: Env (the environment go build runs in) is required to build the agent")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./guest")
	cmd.Dir = moduleDir
	cmd.Env = append(env[:len(env):len(env)], "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build guest agent: %w\n%s", err, b)
	}
	return nil
}

// downloadKernelDeb fetches the real kernel package behind the meta package pkg, of Debian
// architecture debArch.
func downloadKernelDeb(ctx context.Context, dir, pkg, debArch string) (string, error) {
	target := pkg
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "--important", pkg+":"+debArch).Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if dep, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
				target, _, _ = strings.Cut(dep, ":")
				break
			}
		}
	}
	if err := run(ctx, dir, "apt-get", "download", "-q", target+":"+debArch); err != nil {
		hint := "is the apt package list current? run apt-get update"
		if debArch != hostDebArch() {
			hint = "is " + debArch + " a dpkg architecture here? run dpkg --add-architecture " + debArch + " && apt-get update"
		}
		return "", fmt.Errorf("%w (%s)", err, hint)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, target+"_*_"+debArch+".deb"))
	if len(debs) == 0 {
		return "", fmt.Errorf("firmware: apt-get download left no %s_*.deb in %s", target, dir)
	}
	return debs[len(debs)-1], nil
}

func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, b)
	}
	return nil
}

// writeAtomic replaces path with data through a uniquely named temporary file, so readers and
// concurrent writers only ever see a complete file.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
