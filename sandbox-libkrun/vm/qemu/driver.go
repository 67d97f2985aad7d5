// Package qemu is the Linux VM driver: qemu's microvm machine (KVM when a probe boot works, TCG
// otherwise) booting the firmware's uncompressed kernel and agent initramfs, the image root
// served read-only by virtiofsd, and the guest agent reached over a virtio-serial port.
package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// KernelCmdline is the guest kernel command line (see REFERENCE-vm.md for why each word is there).
// The initcall blacklist skips two slow initcalls a sandbox does not use (kprobe tracing and a KDF
// self-test, ~125 ms under TCG by initcall_debug). The keyring initcalls cannot go: later ones
// dereference the system keyring.
const KernelCmdline = "console=ttyS0 panic=-1 reboot=t quiet tsc_early_khz=2600000 tsc=reliable no_timer_check " +
	"cryptomgr.notests mitigations=off init_on_alloc=0 audit=0 apparmor=0 security=none " +
	"random.trust_cpu=on 8250.nr_uarts=1 nokaslr " +
	"initcall_blacklist=init_kprobe_trace,crypto_kdf108_init"

// Options configure a Driver. Empty fields take the defaults below.
type Options struct {
	Qemu        string        // qemu-system binary: $III_QEMU, else qemu-system-x86_64 on PATH
	Virtiofsd   string        // $III_VIRTIOFSD, else /usr/lib/qemu/virtiofsd
	Kernel      string        // uncompressed kernel; default from firmware.Locate
	Initrd      string        // agent initramfs; default from firmware.Locate
	Accel       string        // "kvm", "tcg" or "auto" (the default: KVM when a probe boot works, else TCG)
	BootTimeout time.Duration // bound on boot until the agent answers; default 30 s
}

// Driver boots qemu microvm machines. It is safe for concurrent use.
type Driver struct {
	opt       Options
	accelOnce sync.Once
	accel     string
}

// New returns a driver; it fails when the firmware or binaries cannot be found.
func New(opt Options) (*Driver, error) {
	if opt.Qemu == "" {
		opt.Qemu = QemuPath()
	}
	if opt.Virtiofsd == "" {
		opt.Virtiofsd = VirtiofsdPath()
	}
	if opt.Kernel == "" || opt.Initrd == "" {
		p, err := firmware.Locate()
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
		return nil, fmt.Errorf("qemu not found (%s): install it with `apt-get install qemu-system-x86`", opt.Qemu)
	}
	if _, err := os.Stat(opt.Virtiofsd); err != nil {
		return nil, fmt.Errorf("virtiofsd not found (%s): install it with `apt-get install qemu-system-common`", opt.Virtiofsd)
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

// QemuPath is the qemu binary the driver uses by default: $III_QEMU or qemu-system-x86_64.
func QemuPath() string {
	if p := os.Getenv("III_QEMU"); p != "" {
		return p
	}
	return "qemu-system-x86_64"
}

// VirtiofsdPath is the virtiofsd binary the driver uses by default: $III_VIRTIOFSD or Debian's.
func VirtiofsdPath() string {
	if p := os.Getenv("III_VIRTIOFSD"); p != "" {
		return p
	}
	return "/usr/lib/qemu/virtiofsd"
}

// Name reports the driver and its acceleration, e.g. "qemu-microvm/tcg".
func (d *Driver) Name() string { return "qemu-microvm/" + d.Accel() }

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

func (d *Driver) qemuArgs(spec vm.Spec, accel string, consoleOnly bool, vfsSocks []string, ctrlSock string, extraCmdline string) []string {
	mem := strconv.Itoa(spec.MemoryMB) + "M"
	a := []string{"-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio", "-no-reboot"}
	switch accel {
	case "kvm":
		a = append(a, "-accel", "kvm", "-cpu", "host")
	default:
		if spec.CPUs > 1 {
			a = append(a, "-accel", "tcg,thread=multi")
		} else {
			a = append(a, "-accel", "tcg")
		}
	}
	cmdline := KernelCmdline
	if extraCmdline != "" {
		cmdline += " " + extraCmdline
	}
	a = append(a, "-smp", strconv.Itoa(spec.CPUs), "-m", mem,
		"-kernel", d.opt.Kernel, "-initrd", d.opt.Initrd, "-append", cmdline)
	if consoleOnly {
		return append(a, "-M", "microvm")
	}
	a = append(a, "-M", "microvm,memory-backend=mem",
		"-object", "memory-backend-memfd,id=mem,size="+mem+",share=on",
		"-global", "virtio-mmio.force-legacy=false")
	for i, s := range vfsSocks {
		id := "vfs" + strconv.Itoa(i)
		a = append(a, "-chardev", "socket,id="+id+",path="+s,
			"-device", "vhost-user-fs-device,chardev="+id+",tag="+tagFor(i))
	}
	a = append(a, "-device", "virtio-serial-device",
		"-chardev", "socket,id=ctrl,path="+ctrlSock+",server=on,wait=off",
		"-device", "virtserialport,chardev=ctrl,name=ctrl")
	if spec.Network {
		a = append(a, "-netdev", "user,id=net0", "-device", "virtio-net-device,netdev=net0")
	}
	return a
}

// tagFor names the virtiofs tag of share i: "root" for the image, "m<i>" for extra mounts.
func tagFor(i int) string {
	if i == 0 {
		return "root"
	}
	return "m" + strconv.Itoa(i)
}

// tail returns the last lines of s, at most maxLines lines and maxBytes bytes.
func tail(s string, maxLines, maxBytes int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	out := strings.Join(lines, "\n")
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	return out
}
