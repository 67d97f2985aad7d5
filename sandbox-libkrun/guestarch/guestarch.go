// Package guestarch names the guest architectures the adapter boots and what each needs: the
// Debian kernel package and architecture its firmware is built from, the Go architecture of its
// guest agent, the qemu binary and machine that run it, and the Linux target whose firmware
// directory (dist/firmware/<triple>/) holds it.
//
// The host's own architecture is the default. Another one runs only under software emulation
// (accelerator tcg): on these x86_64 machines that is how the aarch64 guests of aarch64 Linux and
// Apple Silicon are tested.
package guestarch

import (
	"fmt"
	"runtime"
	"strings"
)

// Arch is one guest architecture.
type Arch struct {
	Name   string // `uname -m` in the guest: x86_64, aarch64
	GOARCH string // Go's name, for the guest agent and image platforms: amd64, arm64
	Debian string // Debian's name, for the kernel and image packages: amd64, arm64
	// Triple is the Linux target whose firmware directory holds this architecture's firmware.
	Triple string
	// KernelPackage is the Debian package whose kernel and modules the firmware repackages.
	KernelPackage string
	Qemu          string // qemu-system binary
	QemuPackage   string // the Debian package that provides Qemu
	Machine       string // qemu machine type: microvm on x86_64, virt on aarch64
	Console       string // the guest's serial console device
}

// The guest architectures. aarch64 takes Debian's generic arm64 kernel rather than the cloud
// one: the cloud kernels (amd64 and arm64) are built without 9p (CONFIG_NET_9P unset), and the
// 9p share is the only one qemu offers on macOS, where virtiofsd does not exist.
var (
	X86_64 = Arch{Name: "x86_64", GOARCH: "amd64", Debian: "amd64", Triple: "x86_64-unknown-linux-gnu",
		KernelPackage: "linux-image-cloud-amd64", Qemu: "qemu-system-x86_64", QemuPackage: "qemu-system-x86",
		Machine: "microvm", Console: "ttyS0"}
	AArch64 = Arch{Name: "aarch64", GOARCH: "arm64", Debian: "arm64", Triple: "aarch64-unknown-linux-gnu",
		KernelPackage: "linux-image-arm64", Qemu: "qemu-system-aarch64", QemuPackage: "qemu-system-arm",
		Machine: "virt", Console: "ttyAMA0"}
)

// All lists the guest architectures.
var All = []Arch{X86_64, AArch64}

// Names lists the accepted architecture names.
func Names() []string {
	var n []string
	for _, a := range All {
		n = append(n, a.Name)
	}
	return n
}

// Parse returns the architecture called name (its uname -m, or Go's or Debian's name).
func Parse(name string) (Arch, error) {
	for _, a := range All {
		if name == a.Name || name == a.GOARCH {
			return a, nil
		}
	}
	return Arch{}, fmt.Errorf("unknown guest architecture %q (accepted: %s)", name, strings.Join(Names(), ", "))
}

// ForGOARCH returns the guest architecture that matches Go's architecture goarch.
func ForGOARCH(goarch string) (Arch, bool) {
	for _, a := range All {
		if a.GOARCH == goarch {
			return a, true
		}
	}
	return Arch{}, false
}

// Host is the architecture of this host, the default guest architecture (x86_64 on a host of
// no known guest architecture; the host checks refuse such hosts).
func Host() Arch {
	if a, ok := ForGOARCH(runtime.GOARCH); ok {
		return a
	}
	return X86_64
}

// Native reports whether a runs on this host without emulation (KVM or HVF can serve it).
func (a Arch) Native() bool { return a.GOARCH == runtime.GOARCH }
