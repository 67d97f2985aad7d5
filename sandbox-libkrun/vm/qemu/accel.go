package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/iii-go/iii/internal/base/excerpt"
	"github.com/iii-go/iii/internal/base/procgroup"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// floorMarker is what the guest agent prints in floor mode (guest.FloorMarker).
const floorMarker = "iii-floor: init reached"

// DefaultKVMDevice is the KVM device the driver probes by default.
const DefaultKVMDevice = "/dev/kvm"

// NestedPVM reports whether KVM is served only by a nested "PVM" module (kvm_pvm loaded,
// neither kvm_intel nor kvm_amd), which cannot run a stock guest kernel: its guests need a
// PVM-aware kernel. Tried on such a host, the firmware's kernel ran only in KVM's instruction
// emulator (about 100 s to reach its memory setup, which TCG passes in well under a second)
// and then stopped at an instruction it cannot emulate (lock cmpxchg16b); see vm/README.md.
func NestedPVM() bool {
	return exists("/sys/module/kvm_pvm") && !exists("/sys/module/kvm_intel") && !exists("/sys/module/kvm_amd")
}

// kvmCPUs are the -cpu values auto's probe tries under KVM, in order. The host's CPU first; then
// the host's CPU without IA32_ARCH_CAPABILITIES (MSR 0x10a), which some nested KVMs refuse to
// set, so that qemu aborts at once with "failed to set MSR 0x10a": turning the feature off is
// the known way around it, and costs the guest nothing it uses (the MSR tells a kernel which
// CPU flaws it need not mitigate, and the guest boots with mitigations=off).
var kvmCPUs = []string{"host", "host,-arch-capabilities"}

// probeTimeout bounds each probe boot under KVM: a real KVM boots the floor in a fraction of
// it, and a KVM that needs longer is no faster than TCG.
const probeTimeout = 5 * time.Second

// AccelChoice is how a driver's accelerator was chosen, and for auto what its probe tried.
type AccelChoice struct {
	Accel    string         // kvm, hvf or tcg
	CPU      string         // qemu's -cpu under kvm: one of kvmCPUs; empty under hvf and tcg
	Auto     bool           // chosen by auto (else by the setting)
	Attempts []AccelAttempt // auto's probe boots under KVM, in order
	Why      string         // under auto, why not KVM (or HVF) when the choice is tcg
}

// AccelAttempt is one probe boot under KVM with -cpu CPU.
type AccelAttempt struct {
	CPU  string
	Took time.Duration
	Err  error // nil when the guest agent reached /init and qemu powered off
}

// String is the choice in one line, each attempt with its outcome: what the adapter logs at
// start under auto, e.g. "tcg (kvm: -cpu host: failed in 61ms: ...; -cpu host,-arch-capabilities:
// failed in 5s: ...)" or "kvm -cpu host,-arch-capabilities (-cpu host: failed ...)".
func (c AccelChoice) String() string {
	s := c.Accel
	if c.CPU != "" {
		s += " -cpu " + c.CPU
	}
	var notes []string
	if c.Why != "" {
		notes = append(notes, c.Why)
	}
	for _, a := range c.Attempts {
		// The attempt that booted is the choice itself; only the failed ones need a note.
		if a.Err != nil {
			notes = append(notes, fmt.Sprintf("-cpu %s: failed in %s: %s", a.CPU, a.Took.Round(time.Millisecond), firstLines(a.Err)))
		}
	}
	if len(notes) > 0 {
		prefix := ""
		if c.Accel == "tcg" && len(c.Attempts) > 0 {
			prefix = "kvm: "
		}
		s += " (" + prefix + strings.Join(notes, "; ") + ")"
	}
	return s
}

// firstLines is err in one line: its first line and, from the console tail it carries, qemu's
// own error lines (those that say why it died), at most 300 bytes.
func firstLines(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	parts := []string{strings.TrimSpace(lines[0])}
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if strings.Contains(l, "error") || strings.Contains(l, "Error") || strings.Contains(l, "failed") {
			parts = append(parts, l)
		}
	}
	s := strings.Join(parts, " / ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// accelHost is what auto's choice depends on, so that the decision can be tested with fake
// boots: the real one is Driver.hostFacts.
type accelHost struct {
	native    bool                                        // the guest architecture is the host's
	goos      string                                      // runtime.GOOS
	hvf       func() bool                                 // HVFSupported
	kvmDevice func() error                                // opening the KVM device read-write
	nestedPVM func() bool                                 // NestedPVM
	boot      func(ctx context.Context, cpu string) error // a floor boot under KVM with -cpu cpu
}

// chooseAccel resolves auto: a guest of another architecture than the host's runs under TCG; on
// macOS HVF when the kernel offers it; on Linux KVM with the first of kvmCPUs whose probe boot,
// bounded by probeTimeout, reaches the guest agent, else TCG. A KVM device that does not open
// read-write, or one served by a nested PVM module, is TCG without a probe: a stock guest
// kernel there runs only in KVM's instruction emulator, far slower than TCG, until an
// instruction it cannot emulate stops it.
func chooseAccel(h accelHost) AccelChoice {
	c := AccelChoice{Accel: "tcg", Auto: true}
	switch {
	case !h.native:
		c.Why = "the guest architecture is not the host's"
		return c
	case h.goos == "darwin":
		if h.hvf() {
			c.Accel, c.Why = "hvf", ""
		} else {
			c.Why = "Hypervisor.framework is not available (sysctl kern.hv_support is not 1)"
		}
		return c
	}
	if err := h.kvmDevice(); err != nil {
		c.Why = "kvm not probed: " + err.Error()
		return c
	}
	if h.nestedPVM() {
		c.Why = "kvm not probed: the KVM device is served by a nested PVM module (kvm_pvm), which cannot run a stock guest kernel"
		return c
	}
	for _, cpu := range kvmCPUs {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		start := time.Now()
		err := h.boot(ctx, cpu)
		cancel()
		c.Attempts = append(c.Attempts, AccelAttempt{CPU: cpu, Took: time.Since(start), Err: err})
		if err == nil {
			c.Accel, c.CPU = "kvm", cpu
			return c
		}
	}
	return c
}

// hostFacts is accelHost of this host and driver: its probe boots are floor boots.
func (d *Driver) hostFacts() accelHost {
	h := accelHost{
		native: d.opt.Arch.Native(),
		goos:   runtime.GOOS,
		hvf:    HVFSupported,
		kvmDevice: func() error {
			f, err := os.OpenFile(d.opt.KVMDevice, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			return f.Close()
		},
		nestedPVM: NestedPVM,
		boot: func(ctx context.Context, cpu string) error {
			_, _, err := d.floor(ctx, "kvm", cpu, probeMemoryMB)
			return err
		},
	}
	if d.nestedPVM != nil {
		h.nestedPVM = d.nestedPVM
	}
	return h
}

// AccelChoice reports how the accelerator was chosen (probing on first call, as Accel does).
func (d *Driver) AccelChoice() AccelChoice {
	accel := d.Accel()
	if d.choice.Auto {
		return d.choice
	}
	c := AccelChoice{Accel: accel}
	if accel == "kvm" {
		c.CPU = "host"
	}
	return c
}

// detectAccel resolves auto (see chooseAccel) and keeps how it chose, and under KVM the -cpu
// every machine of the driver then gets: the one the probe booted.
func (d *Driver) detectAccel() string {
	d.choice = chooseAccel(d.hostFacts())
	d.kvmCPU = d.choice.CPU
	return d.choice.Accel
}

// HVFSupported reports whether macOS offers Hypervisor.framework to this process's hardware
// (`sysctl -n kern.hv_support` prints 1).
func HVFSupported() bool {
	out, err := exec.Command("sysctl", "-n", "kern.hv_support").Output()
	return err == nil && strings.TrimSpace(string(out)) == "1"
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// probeMemoryMB is the RAM of the machine that probes whether KVM can boot a guest.
const probeMemoryMB = 256

// Floor boots the kernel and initramfs with one CPU, memoryMB of RAM, nothing attached and an
// /init that powers off at once, and returns the wall time from starting qemu to its exit: the
// cost of a VM doing `true`. Give it the RAM of the machines it is compared with: under TCG a
// 256 MiB machine boots about 50 ms slower than a 512 MiB one.
func (d *Driver) Floor(ctx context.Context, memoryMB int) (time.Duration, error) {
	total, _, err := d.FloorBoot(ctx, memoryMB)
	return total, err
}

// FloorBoot is Floor that also returns the guest's uptime when its /init started, as the agent
// printed it after its marker (0 when it did not).
func (d *Driver) FloorBoot(ctx context.Context, memoryMB int) (total, toInit time.Duration, err error) {
	total, out, err := d.floor(ctx, d.Accel(), "", memoryMB)
	if err != nil {
		return 0, 0, err
	}
	_, after, _ := strings.Cut(out, floorMarker+" at ")
	if ms, _, ok := strings.Cut(after, " ms"); ok {
		if v, err := strconv.Atoi(ms); err == nil {
			toInit = time.Duration(v) * time.Millisecond
		}
	}
	return total, toInit, nil
}

// floor boots the floor machine under accel; kvmCPU, when set, is its -cpu under kvm instead of
// the driver's (auto's probe).
func (d *Driver) floor(ctx context.Context, accel, kvmCPU string, memoryMB int) (time.Duration, string, error) {
	spec := vm.Spec{CPUs: 1, MemoryMB: memoryMB}
	args := d.qemuArgs(qemuConfig{spec: spec, accel: accel, kvmCPU: kvmCPU, consoleOnly: true, extraCmdline: "iii.floor=1"})
	ctx, cancel := context.WithTimeout(ctx, d.opt.BootTimeout)
	defer cancel()
	cmd := exec.Command(d.opt.Qemu, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = procgroup.Attr(true)
	start := time.Now()
	if err := startCmd(cmd); err != nil {
		return 0, "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		dur := time.Since(start)
		if err != nil {
			return 0, "", fmt.Errorf("floor boot: %w\n%s", err, excerpt.Tail(out.String(), 32, 4096))
		}
		// A kernel panic also ends qemu cleanly (panic=-1, -no-reboot): require the agent's word.
		if !strings.Contains(out.String(), floorMarker) {
			return 0, "", fmt.Errorf("floor boot: the guest never reached /init\n%s", excerpt.Tail(out.String(), 32, 4096))
		}
		return dur, out.String(), nil
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return 0, "", fmt.Errorf("floor boot: no power-off before the deadline\n%s", excerpt.Tail(out.String(), 32, 4096))
	}
}
