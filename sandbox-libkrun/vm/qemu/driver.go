// Package qemu is the VM driver: qemu's microvm machine for x86_64 guests and its virt machine
// (GICv3, virtio-mmio devices) for aarch64 guests, under KVM (Linux), HVF (macOS) or TCG,
// booting the firmware's uncompressed kernel and agent initramfs. The image root is served
// read-only by virtiofsd, or by qemu's own virtio-9p server where virtiofsd does not exist
// (macOS); the guest agent is reached over a virtio-serial port.
package qemu

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// KernelCmdline is the x86_64 guest kernel command line: a serial console; a panic reboots at
// once, which -no-reboot turns into qemu exiting; a trusted TSC of fixed rate (no calibration);
// and no self-tests, mitigations, KASLR or security modules, which only cost boot time in a
// throwaway VM. The initcall blacklist skips two slow initcalls a sandbox does not use (kprobe
// tracing and a KDF self-test, ~125 ms under TCG by initcall_debug). The keyring initcalls cannot
// go: later ones dereference the system keyring.
const KernelCmdline = "console=ttyS0 panic=-1 reboot=t quiet tsc_early_khz=2600000 tsc=reliable no_timer_check " +
	commonCmdline + " 8250.nr_uarts=1"

// KernelCmdlineAArch64 is the aarch64 guest kernel command line: the PL011 console of qemu's virt
// machine and the same trimmings as x86_64 (PSCI ends the machine on reboot, -no-reboot makes
// qemu exit).
const KernelCmdlineAArch64 = "console=ttyAMA0 panic=-1 quiet " + commonCmdline

const commonCmdline = "cryptomgr.notests mitigations=off init_on_alloc=0 audit=0 apparmor=0 security=none " +
	"random.trust_cpu=on nokaslr initcall_blacklist=init_kprobe_trace,crypto_kdf108_init"

// The file shares a driver serves the image and the mounts with (Options.Share).
const (
	ShareVirtiofs = vm.ShareVirtiofs
	Share9P       = vm.Share9P
)

// Options configure a Driver. Empty fields take the defaults below.
type Options struct {
	Arch      guestarch.Arch // guest architecture; default the host's
	Share     string         // ShareVirtiofs (default on Linux) or Share9P (default on macOS)
	Qemu      string         // qemu-system binary (the adapter passes $III_QEMU); default QemuPathFor(Arch)
	Virtiofsd string         // virtiofsd binary (the adapter passes $III_VIRTIOFSD); default DefaultVirtiofsd
	KVMDevice string         // the KVM device auto probes (the adapter passes $III_KVM_DEVICE); default DefaultKVMDevice
	Kernel    string         // uncompressed kernel; default from firmware.LocateFor(Getenv, Arch)
	Initrd    string         // agent initramfs; default from firmware.LocateFor(Getenv, Arch)
	// Getenv is the adapter's environment (os.Getenv in its main), whose $III_LIB_DIR moves the
	// firmware Kernel and Initrd default to; nil is an empty one.
	Getenv      func(string) string
	Accel       string        // "kvm", "hvf", "tcg" or "auto" (the default: KVM/HVF when usable, else TCG)
	BootTimeout time.Duration // bound on boot until the agent answers; default 30 s
}

// Driver boots qemu machines: microvm for x86_64 guests, virt for aarch64. It is safe for
// concurrent use.
type Driver struct {
	opt       Options
	accelOnce sync.Once
	accel     string
	kvmCPU    string      // qemu's -cpu under kvm, set by auto's probe; empty: host
	choice    AccelChoice // how auto chose (zero under an explicit accelerator)
	nestedPVM func() bool // NestedPVM, unless a test stands in for it
}

// DefaultShare is the file share of goos: 9p on macOS, virtiofs elsewhere.
func DefaultShare(goos string) string {
	if goos == "darwin" {
		return Share9P
	}
	return ShareVirtiofs
}

// New returns a driver; it fails when the firmware or binaries cannot be found.
func New(opt Options) (*Driver, error) {
	if opt.Arch.Name == "" {
		opt.Arch = guestarch.Host()
	}
	if opt.Share == "" {
		opt.Share = DefaultShare(runtime.GOOS)
	}
	if opt.Share != ShareVirtiofs && opt.Share != Share9P {
		return nil, fmt.Errorf("unknown file share %q (virtiofs or 9p)", opt.Share)
	}
	if opt.Qemu == "" {
		opt.Qemu = QemuPathFor(opt.Arch)
	}
	if opt.Virtiofsd == "" {
		opt.Virtiofsd = DefaultVirtiofsd
	}
	if opt.KVMDevice == "" {
		opt.KVMDevice = DefaultKVMDevice
	}
	if opt.Kernel == "" || opt.Initrd == "" {
		p, err := firmware.LocateFor(opt.Getenv, opt.Arch)
		if err != nil {
			return nil, err
		}
		if opt.Kernel == "" {
			opt.Kernel = p.Kernel
		}
		if opt.Initrd == "" {
			opt.Initrd = p.Initrd
		}
	}
	if _, err := exec.LookPath(opt.Qemu); err != nil {
		return nil, fmt.Errorf("qemu not found (%s): install it with `%s`", opt.Qemu, QemuInstall(runtime.GOOS, opt.Arch))
	}
	if opt.Share == ShareVirtiofs {
		if _, err := os.Stat(opt.Virtiofsd); err != nil {
			return nil, fmt.Errorf("virtiofsd not found (%s): install it with `apt-get install qemu-system-common`", opt.Virtiofsd)
		}
	}
	if opt.BootTimeout <= 0 {
		opt.BootTimeout = 30 * time.Second
	}
	accel := opt.Accel
	if accel == "auto" {
		accel = ""
	}
	return &Driver{opt: opt, accel: accel}, nil
}

// QemuInstall is the command that installs the qemu of guest architecture a on goos.
func QemuInstall(goos string, a guestarch.Arch) string {
	if goos == "darwin" {
		return "brew install qemu"
	}
	return "apt-get install " + a.QemuPackage
}

// QemuPathFor is the qemu binary the driver uses by default for guests of a: a.Qemu on PATH; on
// macOS, where an adapter started by Compose may lack Homebrew's directory in PATH, Homebrew's
// copy when PATH has none.
func QemuPathFor(a guestarch.Arch) string {
	if runtime.GOOS == "darwin" {
		if _, err := exec.LookPath(a.Qemu); err != nil {
			for _, dir := range homebrewBins {
				if p := filepath.Join(dir, a.Qemu); isFile(p) {
					return p
				}
			}
		}
	}
	return a.Qemu
}

// homebrewBins are Homebrew's binary directories (Apple Silicon, then Intel).
var homebrewBins = []string{"/opt/homebrew/bin", "/usr/local/bin"}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// DefaultVirtiofsd is the virtiofsd binary the driver uses by default: Debian's.
const DefaultVirtiofsd = "/usr/lib/qemu/virtiofsd"

// Name reports the driver, its acceleration and, when it is not virtiofs, its file share, e.g.
// "qemu-microvm/tcg" or "qemu-virt/hvf/9p".
func (d *Driver) Name() string {
	n := "qemu-" + d.opt.Arch.Machine + "/" + d.Accel()
	if d.opt.Share != ShareVirtiofs {
		n += "/" + d.opt.Share
	}
	return n
}

// Arch is the guest architecture the driver boots.
func (d *Driver) Arch() guestarch.Arch { return d.opt.Arch }

// Share is the file share the driver serves the image and mounts with.
func (d *Driver) Share() string { return d.opt.Share }

// Accel returns the acceleration in use, probing on first call.
func (d *Driver) Accel() string {
	d.accelOnce.Do(func() {
		if d.accel == "" {
			d.accel = d.detectAccel()
		}
	})
	return d.accel
}

// Boot starts a machine for spec and returns once its agent has assembled the root. ctx and
// Options.BootTimeout bound the boot only; afterwards the machine lives until Stop, its
// Spec.Deadline, or the end of the adapter process. A zero Spec.ScratchMB means half the RAM.
func (d *Driver) Boot(ctx context.Context, spec vm.Spec) (vm.Machine, error) {
	return d.boot(ctx, spec)
}

// qemuConfig is what a qemu command line is built from.
type qemuConfig struct {
	spec         vm.Spec
	accel        string   // "kvm", "hvf" or "tcg"
	kvmCPU       string   // qemu's -cpu under kvm for this boot (auto's probe); empty: the driver's
	consoleOnly  bool     // boot the kernel with nothing attached (the floor)
	vfsSocks     []string // virtiofsd sockets of the image root and the mounts (virtiofs)
	ctrlSock     string   // the socket of the agent's port
	extraCmdline string   // appended to the kernel command line
	qmpSock      string   // when set, qemu's monitor (QMP) listens on this socket
	incoming     bool     // wait for a migration stream (a snapshot) instead of booting
	ram          string   // with a root disk: the file holding the guest's RAM (snapshots)
	ramShared    bool     // map ram shared (the machine a snapshot is saved from), else private
}

// qemuArgs is qemu's command line for c. Unless c.consoleOnly, the shares are served from
// c.vfsSocks (virtiofs) or by qemu itself (9p: the image root read-only, then spec.Mounts), and
// the agent's port is the socket c.ctrlSock.
func (d *Driver) qemuArgs(c qemuConfig) []string {
	mem := strconv.Itoa(c.spec.MemoryMB) + "M"
	aarch64 := d.opt.Arch.Machine == "virt"
	a := []string{"-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio", "-no-reboot"}
	a = append(a, accelArgs(c.accel, cmp.Or(c.kvmCPU, d.kvmCPU), c.spec.CPUs, aarch64)...)
	a = append(a, "-smp", strconv.Itoa(c.spec.CPUs), "-m", mem,
		"-kernel", d.opt.Kernel, "-initrd", d.opt.Initrd, "-append", kernelCmdline(aarch64, c.extraCmdline))
	machine := machineType(aarch64, c.accel)
	if c.consoleOnly {
		return append(a, "-M", machine)
	}
	a = append(a, d.rootArgs(c, machine, mem)...)
	if c.spec.Disk != "" {
		a = append(a, diskArgs(c.spec.Disk)...)
	}
	// The agent's port is the only one: max_ports=2 (port 0 stays reserved for a console) makes
	// the guest's virtio_console set up 6 virtqueues instead of 64, about 7 ms less module
	// loading under TCG.
	a = append(a, "-device", "virtio-serial-device,max_ports=2",
		"-chardev", "socket,id=ctrl,path="+optEscape(c.ctrlSock)+",server=on,wait=off",
		"-device", "virtserialport,chardev=ctrl,name=ctrl")
	if c.spec.Network {
		a = append(a, "-netdev", "user,id=net0", "-device", "virtio-net-device,netdev=net0")
	}
	if c.qmpSock != "" {
		a = append(a, "-qmp", "unix:"+optEscape(c.qmpSock)+",server=on,wait=off")
	}
	if c.incoming {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// accelArgs are qemu's acceleration and CPU flags: under kvm -cpu kvmCPU (default host, the
// host's CPU), under hvf the host's CPU, else TCG (multi-threaded for more than one CPU).
func accelArgs(accel, kvmCPU string, cpus int, aarch64 bool) []string {
	switch accel {
	case "kvm":
		return []string{"-accel", accel, "-cpu", cmp.Or(kvmCPU, "host")}
	case "hvf":
		return []string{"-accel", accel, "-cpu", "host"}
	}
	var a []string
	if cpus > 1 {
		a = append(a, "-accel", "tcg,thread=multi")
	} else {
		a = append(a, "-accel", "tcg")
	}
	if aarch64 {
		// cortex-a72 boots about 4x faster under TCG than -cpu max (no pointer
		// authentication or SVE to emulate).
		a = append(a, "-cpu", "cortex-a72")
	}
	return a
}

// kernelCmdline is the guest kernel's command line for the architecture, extra appended.
func kernelCmdline(aarch64 bool, extra string) string {
	cmdline := KernelCmdline
	if aarch64 {
		cmdline = KernelCmdlineAArch64
	}
	if extra != "" {
		cmdline += " " + extra
	}
	return cmdline
}

// machineType is qemu's machine: microvm on x86_64, virt with a GICv3 on aarch64.
func machineType(aarch64 bool, accel string) string {
	if !aarch64 {
		return "microvm"
	}
	// A GICv3 in qemu (TCG, HVF) or the host's (KVM).
	if accel == "kvm" {
		return "virt,gic-version=host"
	}
	return "virt,gic-version=3"
}

// rootArgs are the machine flag and the devices of the root and the mounts: the root disk
// when c has one, else the shares over 9p, or over virtiofs from c.vfsSocks (with the shared
// memory of size mem vhost-user needs).
func (d *Driver) rootArgs(c qemuConfig, machine, mem string) []string {
	var a []string
	switch {
	case c.spec.RootDisk != "":
		// A disk instead of a share: nothing that qemu cannot migrate, so no memfd RAM either.
		// A snapshot's RAM is a file: the saved machine writes it through a shared mapping, and
		// each restored copy maps it private, so the guest's pages are read from the host's page
		// cache as it touches them (shared by every copy) and what a copy writes stays its own.
		if c.ram != "" {
			share := "off"
			if c.ramShared {
				share = "on"
			}
			a = append(a, "-object", "memory-backend-file,id=mem,size="+mem+",mem-path="+optEscape(c.ram)+",share="+share)
			machine += ",memory-backend=mem"
		} else if c.incoming {
			// A parked machine's whole stream (RAM included) names the RAM block of the machine
			// it was saved from, "mem": it is loaded into plain memory of that name.
			a = append(a, "-object", "memory-backend-ram,id=mem,size="+mem)
			machine += ",memory-backend=mem"
		}
		a = append(a, "-M", machine,
			"-drive", "file="+optEscape(c.spec.RootDisk)+",format=raw,if=none,id=root,readonly=on",
			"-device", "virtio-blk-device,drive=root")
	case d.opt.Share == Share9P:
		a = append(a, "-M", machine)
		shares := append([]vm.Mount{{Host: c.spec.RootFS, ReadOnly: true}}, c.spec.Mounts...)
		for i, sh := range shares {
			id := "fs" + strconv.Itoa(i)
			// readonly=on: qemu's 9p server refuses every write, whatever the guest kernel does.
			fsdev := "local,id=" + id + ",path=" + optEscape(sh.Host) + ",security_model=none"
			if sh.ReadOnly {
				fsdev += ",readonly=on"
			}
			a = append(a, "-fsdev", fsdev, "-device", "virtio-9p-device,fsdev="+id+",mount_tag="+tagFor(i))
		}
	default:
		// vhost-user needs modern virtio, which virtio-mmio does not offer by default.
		a = append(a, "-M", machine+",memory-backend=mem",
			"-object", "memory-backend-memfd,id=mem,size="+mem+",share=on",
			"-global", "virtio-mmio.force-legacy=false")
		for i, s := range c.vfsSocks {
			id := "vfs" + strconv.Itoa(i)
			a = append(a, "-chardev", "socket,id="+id+",path="+optEscape(s),
				"-device", "vhost-user-fs-device,chardev="+id+",tag="+tagFor(i))
		}
	}
	return a
}

// diskArgs attach the raw image at path as a virtio block device. discard=unmap gives the
// guest's freed blocks back to the sparse file; werror/rerror=report pass a host I/O error (the
// host's disk full) to the guest instead of pausing the machine; qemu's image lock refuses a
// second machine on the same disk.
func diskArgs(path string) []string {
	return []string{"-drive", "file=" + optEscape(path) + ",if=none,id=statedisk,format=raw,discard=unmap,werror=report,rerror=report",
		"-device", "virtio-blk-device,drive=statedisk,serial=" + proto.StateDiskSerial}
}

// optEscape doubles the commas of a value inside a qemu option list.
func optEscape(v string) string { return strings.ReplaceAll(v, ",", ",,") }

// tagFor names the virtiofs tag of share i: "root" for the image, "m<i>" for extra mounts.
func tagFor(i int) string {
	if i == 0 {
		return "root"
	}
	return "m" + strconv.Itoa(i)
}
