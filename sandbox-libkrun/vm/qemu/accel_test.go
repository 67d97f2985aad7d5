package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

func fakeDriver(t *testing.T, opt Options) *Driver {
	t.Helper()
	opt.Qemu, opt.Virtiofsd, opt.Kernel, opt.Initrd = "/bin/false", "/bin/true", "/nonexistent/k", "/nonexistent/i"
	d, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestAccelWithoutKVMDevice(t *testing.T) {
	if got := fakeDriver(t, Options{Accel: "auto", KVMDevice: filepath.Join(t.TempDir(), "kvm")}).Name(); got != "qemu-microvm/tcg" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestAccelExplicit(t *testing.T) {
	if got := fakeDriver(t, Options{Accel: "kvm"}).Accel(); got != "kvm" {
		t.Fatalf("Accel() = %q", got)
	}
}

func TestAccelProbeFailureFallsBack(t *testing.T) {
	// With a usable device node but a qemu that fails at once, the probe boot fails: TCG.
	if got := fakeDriver(t, Options{Accel: "auto", KVMDevice: "/dev/null"}).Accel(); got != "tcg" {
		t.Fatalf("Accel() = %q", got)
	}
}

// fakeHost is a Linux host with a usable KVM device whose probe boots answer from fails (a
// missing CPU boots), recording the CPUs tried.
func fakeHost(tried *[]string, fails map[string]error) accelHost {
	return accelHost{
		native:    true,
		goos:      "linux",
		hvf:       func() bool { return false },
		kvmDevice: func() error { return nil },
		nestedPVM: func() bool { return false },
		boot: func(ctx context.Context, cpu string) error {
			*tried = append(*tried, cpu)
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > probeTimeout {
				return errors.New("probe boot without its deadline")
			}
			return fails[cpu]
		},
	}
}

var errMSR = errors.New("floor boot: signal: aborted\nqemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\nqemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed.")

func TestChooseAccelHostCPU(t *testing.T) {
	var tried []string
	c := chooseAccel(fakeHost(&tried, nil))
	if c.Accel != "kvm" || c.CPU != "host" || !c.Auto || !slices.Equal(tried, []string{"host"}) {
		t.Fatalf("choice %+v after %v", c, tried)
	}
	if c.String() != "kvm -cpu host" {
		t.Fatalf("String() = %q", c.String())
	}
}

// A KVM that refuses MSR 0x10a gets the host's CPU without arch-capabilities, and the log says
// why the first CPU was passed over.
func TestChooseAccelArchCapabilitiesWorkaround(t *testing.T) {
	var tried []string
	c := chooseAccel(fakeHost(&tried, map[string]error{"host": errMSR}))
	if c.Accel != "kvm" || c.CPU != "host,-arch-capabilities" || !slices.Equal(tried, kvmCPUs) {
		t.Fatalf("choice %+v after %v", c, tried)
	}
	s := c.String()
	if !strings.HasPrefix(s, "kvm -cpu host,-arch-capabilities (-cpu host: failed in ") || !strings.Contains(s, "failed to set MSR 0x10a") || strings.Contains(s, "\n") {
		t.Fatalf("String() = %q", s)
	}
}

// When no CPU boots, auto is TCG, and says what each attempt printed.
func TestChooseAccelAllFail(t *testing.T) {
	var tried []string
	c := chooseAccel(fakeHost(&tried, map[string]error{"host": errMSR, "host,-arch-capabilities": errors.New("floor boot: no power-off before the deadline\n")}))
	if c.Accel != "tcg" || c.CPU != "" || len(c.Attempts) != 2 || !slices.Equal(tried, kvmCPUs) {
		t.Fatalf("choice %+v after %v", c, tried)
	}
	s := c.String()
	for _, want := range []string{"tcg (kvm: -cpu host: failed in ", "failed to set MSR 0x10a", "; -cpu host,-arch-capabilities: failed in ", "no power-off before the deadline)"} {
		if !strings.Contains(s, want) {
			t.Fatalf("String() = %q, want %q in it", s, want)
		}
	}
}

// Hosts where auto knows the answer without a probe boot never start one.
func TestChooseAccelWithoutProbe(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*accelHost)
		want string
	}{
		{"foreign guest", func(h *accelHost) { h.native = false }, "tcg (the guest architecture is not the host's)"},
		{"no device", func(h *accelHost) {
			h.kvmDevice = func() error { return errors.New("open /dev/kvm: permission denied") }
		}, "tcg (kvm not probed: open /dev/kvm: permission denied)"},
		{"nested PVM", func(h *accelHost) { h.nestedPVM = func() bool { return true } }, "tcg (kvm not probed: the KVM device is served by a nested PVM module (kvm_pvm), which cannot run a stock guest kernel)"},
		{"macOS with HVF", func(h *accelHost) { h.goos, h.hvf = "darwin", func() bool { return true } }, "hvf"},
		{"macOS without HVF", func(h *accelHost) { h.goos = "darwin" }, "tcg (Hypervisor.framework is not available (sysctl kern.hv_support is not 1))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tried []string
			h := fakeHost(&tried, nil)
			tc.edit(&h)
			c := chooseAccel(h)
			if c.String() != tc.want || len(tried) != 0 {
				t.Fatalf("String() = %q after probe boots %v; want %q", c.String(), tried, tc.want)
			}
		})
	}
}

// fakeQemu is a qemu that powers off as the floor does only when started with -accel kvm and
// -cpu cpu, and otherwise aborts as qemu does on a KVM that refuses MSR 0x10a.
func fakeQemu(t *testing.T, cpu string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu-system-x86_64")
	script := "#!/bin/sh\ncase \" $* \" in *' -accel kvm -cpu " + cpu + " '*) echo '" + floorMarker + " at 7 ms'; exit 0;; esac\n" +
		"echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69' >&2\nkill -ABRT $$\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The driver's probe boots a real process with the command line of each CPU in turn, and every
// machine then gets the CPU that booted.
func TestAutoProbeCommandLine(t *testing.T) {
	d, err := New(Options{Arch: guestarch.Host(), Accel: "auto", KVMDevice: "/dev/null", Qemu: fakeQemu(t, "host,-arch-capabilities"),
		Virtiofsd: "/bin/true", Kernel: "/nonexistent/k", Initrd: "/nonexistent/i"})
	if err != nil {
		t.Fatal(err)
	}
	d.nestedPVM = func() bool { return false }
	if !guestarch.Host().Native() {
		t.Fatal("the host's guest architecture is not native")
	}
	if d.Name() != "qemu-"+guestarch.Host().Machine+"/kvm" {
		t.Fatalf("Name() = %q; choice %s", d.Name(), d.AccelChoice())
	}
	c := d.AccelChoice()
	if c.CPU != "host,-arch-capabilities" || len(c.Attempts) != 2 || !strings.Contains(c.Attempts[0].Err.Error(), "failed to set MSR 0x10a") {
		t.Fatalf("choice %s", c)
	}
	args := strings.Join(d.qemuArgs(qemuConfig{spec: vm.Spec{CPUs: 1, MemoryMB: 512}, accel: d.Accel(), ctrlSock: "/c"}), " ")
	if !strings.Contains(args, "-accel kvm -cpu host,-arch-capabilities ") {
		t.Fatalf("machine args %s", args)
	}
}

// A qemu that aborts under every CPU leaves auto on TCG, and the machines with TCG's flags.
func TestAutoProbeAllFailIsTCG(t *testing.T) {
	d, err := New(Options{Arch: guestarch.Host(), Accel: "auto", KVMDevice: "/dev/null", Qemu: fakeQemu(t, "none"),
		Virtiofsd: "/bin/true", Kernel: "/nonexistent/k", Initrd: "/nonexistent/i"})
	if err != nil {
		t.Fatal(err)
	}
	d.nestedPVM = func() bool { return false }
	if got := d.Accel(); got != "tcg" {
		t.Fatalf("Accel() = %q", got)
	}
	if s := d.AccelChoice().String(); !strings.HasPrefix(s, "tcg (kvm: -cpu host: failed in ") || strings.Count(s, "failed to set MSR 0x10a") != 2 {
		t.Fatalf("choice %s", s)
	}
	if args := strings.Join(d.qemuArgs(qemuConfig{spec: vm.Spec{CPUs: 1, MemoryMB: 512}, accel: d.Accel(), ctrlSock: "/c"}), " "); !strings.Contains(args, "-accel tcg ") || strings.Contains(args, "-cpu") {
		t.Fatalf("machine args %s", args)
	}
}

// An explicit kvm keeps the host's CPU and reports no probe.
func TestAccelChoiceExplicit(t *testing.T) {
	if s := fakeDriver(t, Options{Accel: "kvm"}).AccelChoice().String(); s != "kvm -cpu host" {
		t.Fatalf("AccelChoice() = %q", s)
	}
	if s := fakeDriver(t, Options{Accel: "tcg"}).AccelChoice().String(); s != "tcg" {
		t.Fatalf("AccelChoice() = %q", s)
	}
}
