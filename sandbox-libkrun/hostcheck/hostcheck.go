// Package hostcheck verifies, before the adapter serves anything, that this host can run sandbox
// microVMs: each missing piece is reported on its own with the command that fixes it.
//
// Tests and operators can point the checks elsewhere through the environment (Config.Getenv):
// III_QEMU (qemu binary), III_VIRTIOFSD (virtiofsd binary), III_KVM_DEVICE (the KVM device,
// default /dev/kvm), III_LIBCAPNG (a path that must exist in place of libcap-ng.so.0),
// III_LIB_DIR (firmware directory, default ~/.iii/lib), III_MKFS (the mkfs.ext4 that formats
// VM workers' state disks); III_TARGET (the host's target triple) is platform.Host's.
//
// On Linux: qemu for the guest architecture, virtiofsd (file_share virtiofs), /dev/kvm (only
// under the kvm accelerator, the Linux default, req H2; tcg runs anywhere and auto falls back to
// tcg), libcap-ng0 and the firmware; with VM-worker state disks on (worker_disk_mb > 0), mkfs.ext4
// on every host, so that no VM worker silently boots without its disk. On Apple Silicon macOS: Homebrew's qemu, Hypervisor.framework
// under hvf, and the firmware. Other hosts get UNSUPPORTED_PLATFORM (req H3).
package hostcheck

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/internal/base/hostreq"
	"github.com/iii-go/iii/internal/base/platform"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// Problem is one failed check.
type Problem struct {
	Check   string // short name: platform, qemu, virtiofsd, kvm, hvf, accelerator, libcap-ng, firmware, mkfs
	Message string // what is wrong and how to fix it
	// Fatal problems stop the adapter from starting. Every check is fatal today.
	Fatal bool
}

// String renders the check and its message.
func (p Problem) String() string { return p.Check + ": " + p.Message }

// Config is what the checks are run for. Zero fields take the running host's values.
type Config struct {
	Target platform.Target // the host: platform.Host(Getenv) ($III_TARGET honoured)
	Accel  string          // the accelerator (settings.Accel*)
	Arch   guestarch.Arch  // the guest architecture: the host's
	Share  string          // the file share: settings.DefaultFileShare of the host
	// HVF reports whether Hypervisor.framework is usable (macOS): qemu.HVFSupported.
	HVF func() bool
	// Getenv is the adapter's environment (os.Getenv in its main); nil is an empty one.
	Getenv func(string) string
	// StateDisk says VM workers get a state disk (worker_disk_mb > 0), which needs mkfs.ext4.
	StateDisk bool
}

// Run performs every check for c and returns the problems found (none on a ready host). The KVM,
// libcap-ng and firmware checks are internal/base/hostreq's, which `iii doctor` runs too.
func Run(c Config) []Problem {
	if c.Getenv == nil {
		c.Getenv = func(string) string { return "" }
	}
	if c.Target.Triple == "" {
		c.Target = platform.Host(c.Getenv)
	}
	if p := Platform(c.Target); p != nil {
		return []Problem{*p}
	}
	if c.Arch.Name == "" {
		c.Arch, _ = guestarch.ForGOARCH(c.Target.GOARCH)
	}
	if c.Share == "" {
		c.Share = settings.DefaultFileShare(c.Target.GOOS)
	}
	if c.HVF == nil {
		c.HVF = qemu.HVFSupported
	}
	darwin := c.Target.GOOS == "darwin"
	var ps []Problem
	if q := cmp.Or(c.Getenv("III_QEMU"), qemu.QemuPathFor(c.Arch)); !found(q) {
		where := q + " not found"
		if darwin {
			where = q + " not found on PATH nor in /opt/homebrew/bin"
		}
		ps = append(ps, Problem{"qemu", fmt.Sprintf("qemu is not installed (%s); install it with `%s`", where, qemu.QemuInstall(c.Target.GOOS, c.Arch)), true})
	}
	if c.Share == settings.ShareVirtiofs {
		if darwin {
			ps = append(ps, Problem{"virtiofsd", "virtiofsd does not exist on macOS; set `file_share: 9p` (the default there)", true})
		} else if v := cmp.Or(c.Getenv("III_VIRTIOFSD"), qemu.DefaultVirtiofsd); !found(v) {
			ps = append(ps, Problem{"virtiofsd", fmt.Sprintf("virtiofsd is not installed (%s not found); install it with `apt-get install qemu-system-common`", v), true})
		}
	}
	env := hostreq.Env{Getenv: c.Getenv}
	switch {
	case c.Accel == settings.AccelKVM && darwin:
		ps = append(ps, Problem{"accelerator", "accelerator `kvm` is Linux's; on macOS use `hvf` (Hypervisor.framework), `auto` or `tcg`", true})
	case c.Accel == settings.AccelKVM:
		if p := hostreq.KVM(env.KVMDevice()); p != nil {
			ps = append(ps, Problem{"kvm", p.String(), true})
		} else if qemu.NestedPVM() {
			ps = append(ps, Problem{"kvm", "KVM cannot boot a guest here -- /dev/kvm is served by a nested PVM module (kvm_pvm) that cannot run a stock guest kernel. " + hostreq.TCGHint, true})
		}
	case c.Accel == settings.AccelHVF && !darwin:
		ps = append(ps, Problem{"accelerator", "accelerator `hvf` is macOS's Hypervisor.framework; on Linux use `kvm`, `auto` or `tcg`", true})
	case c.Accel == settings.AccelHVF && !c.HVF():
		ps = append(ps, Problem{"hvf", "Hypervisor.framework is not available (`sysctl kern.hv_support` is not 1: a virtual machine without nested virtualization?); set `accelerator: tcg` in the adapter's config_override to run sandboxes under software emulation", true})
	}
	if !darwin {
		if p := hostreq.LibCapNG(env); p != nil {
			ps = append(ps, Problem{"libcap-ng", p.String(), true})
		}
	}
	if c.StateDisk {
		if p := hostreq.Mkfs(env); p != nil {
			ps = append(ps, Problem{"mkfs", p.String() + " (" + p.Code + ")", true})
		}
	}
	ps = append(ps, firmwareProblems(c)...)
	return ps
}

// Platform reports UNSUPPORTED_PLATFORM when the adapter has no build for target t: musl Linux,
// Intel Macs, Windows (req H3).
func Platform(t platform.Target) *Problem {
	if p := hostreq.Platform(t); p != nil {
		return &Problem{Check: "platform", Message: p.String() + " (UNSUPPORTED_PLATFORM)", Fatal: true}
	}
	return nil
}

// firmwareProblems checks the firmware of the guest architecture: present, and, where its
// manifest says so, built for that architecture and able to mount the file share.
func firmwareProblems(c Config) []Problem {
	dir := firmware.Dir(c.Getenv)
	native := c.Arch.GOARCH == c.Target.GOARCH
	if !native {
		dir = filepath.Join(dir, c.Arch.Name)
	}
	if p := hostreq.Firmware(dir); p != nil {
		if native {
			return []Problem{{"firmware", p.String(), true}}
		}
		return []Problem{{"firmware", fmt.Sprintf("VM firmware for %s guests missing: %s not found; the adapter installs it at start from %s/ beside its binary, which `go tool mage build` links to dist/firmware/%s/ (built by `go tool mage firmware`); or copy the firmware/ directory of the sandbox-libkrun-%s archive there",
			c.Arch.Name, p.Path, firmware.BundleDir+"-"+c.Arch.Name, c.Arch.Triple, c.Arch.Triple), true}}
	}
	m, err := firmware.ReadManifest(firmware.At(dir))
	if err != nil {
		return nil // a firmware nobody built here (no manifest): taken as it is
	}
	var ps []Problem
	if m.ArchOf() != c.Arch.Name {
		ps = append(ps, Problem{"firmware", fmt.Sprintf("the VM firmware in %s is for %s guests, not %s; reinstall the adapter built for this host (or remove its iii-vm-* files so the adapter installs its own)", dir, m.ArchOf(), c.Arch.Name), true})
	}
	if !m.Serves(c.Share) {
		ps = append(ps, Problem{"firmware", fmt.Sprintf("the VM firmware in %s (kernel %s) cannot mount a %s share: its kernel has no %s modules; set `file_share: %s`", dir, m.KernelRelease, c.Share, c.Share, settings.ShareVirtiofs), true})
	}
	return ps
}

// Err joins the fatal problems into one error, or returns nil.
func Err(ps []Problem) error {
	var msgs []string
	for _, p := range ps {
		if p.Fatal {
			msgs = append(msgs, p.String())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New("host cannot run sandbox VMs:\n  " + strings.Join(msgs, "\n  "))
}

func found(bin string) bool {
	if strings.Contains(bin, "/") {
		st, err := os.Stat(bin)
		return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
	}
	_, err := exec.LookPath(bin)
	return err == nil
}
