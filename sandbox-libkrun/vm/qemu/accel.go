package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/excerpt"
	"github.com/iii-go/iii/engine/procgroup"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// floorMarker is what the guest agent prints in floor mode (guest.FloorMarker).
const floorMarker = "iii-floor: init reached"

// DefaultKVMDevice is the KVM device the driver probes by default.
const DefaultKVMDevice = "/dev/kvm"

// NestedPVM reports whether KVM is served only by a nested "PVM" module (kvm_pvm loaded,
// neither kvm_intel nor kvm_amd), which cannot run a stock guest kernel: its guests need a
// PVM-aware kernel.
func NestedPVM() bool {
	return exists("/sys/module/kvm_pvm") && !exists("/sys/module/kvm_intel") && !exists("/sys/module/kvm_amd")
}

// detectAccel resolves AccelAuto: a guest of another architecture than the host's runs under
// TCG; on macOS HVF when the kernel offers it (sysctl kern.hv_support); on Linux KVM only when a
// short probe boot under it really reaches the guest agent, and a nested PVM KVM goes straight
// to TCG.
func (d *Driver) detectAccel() string {
	if !d.opt.Arch.Native() {
		return "tcg"
	}
	if runtime.GOOS == "darwin" {
		if HVFSupported() {
			return "hvf"
		}
		return "tcg"
	}
	f, err := os.OpenFile(d.opt.KVMDevice, os.O_RDWR, 0)
	if err != nil {
		return "tcg"
	}
	f.Close()
	if NestedPVM() {
		return "tcg"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := d.floor(ctx, "kvm", probeMemoryMB); err != nil {
		return "tcg"
	}
	return "kvm"
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
	total, out, err := d.floor(ctx, d.Accel(), memoryMB)
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

func (d *Driver) floor(ctx context.Context, accel string, memoryMB int) (time.Duration, string, error) {
	spec := vm.Spec{CPUs: 1, MemoryMB: memoryMB}
	args := d.qemuArgs(qemuConfig{spec: spec, accel: accel, consoleOnly: true, extraCmdline: "iii.floor=1"})
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
		return 0, "", errors.New("floor boot: no power-off before the deadline")
	}
}
