package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// DriverStats are the VM driver's own costs for one image.
type DriverStats struct {
	Boot  Stats // Boot until the agent has assembled the root
	Exec  Stats // one `true` in a booted machine
	Stop  Stats // Stop until every process has exited
	Cycle Stats // boot + exec `true` + stop
	// Phases are the boot's phases and the first exec.
	Phases Breakdown
}

// measureDriver boots a machine on rootfs n times, running `true` in each.
func measureDriver(ctx context.Context, d *qemu.Driver, rootfs string, n int) (DriverStats, error) {
	var boot, ex, stop, cycle []time.Duration
	var phases Breakdown
	for i := 0; i < n; i++ {
		state, err := os.MkdirTemp("", "iii-bench-")
		if err != nil {
			return DriverStats{}, err
		}
		t0 := time.Now()
		m, err := d.Boot(ctx, vm.Spec{RootFS: rootfs, CPUs: 1, MemoryMB: sandboxMemoryMB, StateDir: state, ScratchMB: sandboxMemoryMB / 2})
		if err != nil {
			os.RemoveAll(state)
			return DriverStats{}, err
		}
		t1 := time.Now()
		first := len(ex)
		for j := 0; j < 5; j++ {
			s := time.Now()
			res, err := m.Exec(ctx, vm.ExecRequest{Argv: []string{"true"}})
			if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
				_ = m.Stop(ctx)
				os.RemoveAll(state)
				return DriverStats{}, fmt.Errorf("exec true: %w", err)
			}
			ex = append(ex, time.Since(s))
		}
		phases.Add(append(bootPhases(m), qemu.Phase{Name: "exec", D: ex[first]}))
		t2 := time.Now()
		_ = m.Stop(ctx)
		<-m.Done()
		t3 := time.Now()
		os.RemoveAll(state)
		boot = append(boot, t1.Sub(t0))
		stop = append(stop, t3.Sub(t2))
		cycle = append(cycle, t3.Sub(t0)-t2.Sub(t1)+ex[len(ex)-1])
	}
	return DriverStats{Boot: summarize(boot), Exec: summarize(ex), Stop: summarize(stop), Cycle: summarize(cycle), Phases: phases}, nil
}
