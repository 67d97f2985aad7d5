// Package hostcheck verifies, before the adapter serves anything, that this host can run sandbox
// microVMs: each missing piece is reported on its own with the command that fixes it.
//
// Tests and operators can point the checks elsewhere through the environment: III_QEMU (qemu
// binary), III_VIRTIOFSD (virtiofsd binary), III_KVM_DEVICE (the KVM device, default /dev/kvm),
// III_LIBCAPNG (a path that must exist in place of libcap-ng.so.0) and III_LIB_DIR (firmware
// directory, default ~/.iii/lib).
//
// /dev/kvm is checked only under the kvm accelerator (the Linux default, req H2); tcg runs
// anywhere and auto falls back to tcg, so neither needs it.
package hostcheck

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/iii-go/iii/engine/hostreq"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// Problem is one failed check.
type Problem struct {
	Check   string // short name: qemu, virtiofsd, kvm, libcap-ng, firmware
	Message string // what is wrong and how to fix it
	// Fatal problems stop the adapter from starting. Every check is fatal today.
	Fatal bool
}

// String renders the check and its message.
func (p Problem) String() string { return p.Check + ": " + p.Message }

// Run performs every check for the accelerator accel (settings.Accel*) and returns the problems
// found (none on a ready host). The KVM, libcap-ng and firmware checks are engine/hostreq's,
// which `iii doctor` runs too.
func Run(accel string) []Problem {
	if runtime.GOOS != "linux" {
		return []Problem{{Check: "platform", Message: "sandbox microVMs need Linux (UNSUPPORTED_PLATFORM: " + runtime.GOOS + "/" + runtime.GOARCH + ")", Fatal: true}}
	}
	var ps []Problem
	if q := qemu.QemuPath(); !found(q) {
		ps = append(ps, Problem{"qemu", fmt.Sprintf("qemu is not installed (%s not found); install it with `apt-get install qemu-system-x86`", q), true})
	}
	if v := qemu.VirtiofsdPath(); !found(v) {
		ps = append(ps, Problem{"virtiofsd", fmt.Sprintf("virtiofsd is not installed (%s not found); install it with `apt-get install qemu-system-common`", v), true})
	}
	env := hostreq.Env{}
	switch accel {
	case settings.AccelKVM:
		if p := hostreq.KVM(env.KVMDevice()); p != nil {
			ps = append(ps, Problem{"kvm", p.String(), true})
		} else if qemu.NestedPVM() {
			ps = append(ps, Problem{"kvm", "KVM cannot boot a guest here -- /dev/kvm is served by a nested PVM module (kvm_pvm) that cannot run a stock guest kernel. " + hostreq.TCGHint, true})
		}
	case settings.AccelHVF:
		ps = append(ps, Problem{"accelerator", "accelerator `hvf` is macOS's Hypervisor.framework; on Linux use `kvm`, `auto` or `tcg`", true})
	}
	if p := hostreq.LibCapNG(env); p != nil {
		ps = append(ps, Problem{"libcap-ng", p.String(), true})
	}
	if p := hostreq.Firmware(firmware.Dir()); p != nil {
		ps = append(ps, Problem{"firmware", p.String(), true})
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
