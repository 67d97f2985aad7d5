package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// snapshotCases are the commands timed in machines restored from a snapshot, with the targets
// of issue 28 (ratio to the floor).
var snapshotCases = []struct {
	Label  string
	Argv   []string
	Target float64
}{
	{"shell `true` (sh -c true)", []string{"sh", "-c", "true"}, 0.25},
	{"python print(1)", []string{"python3", "-c", "print(1)"}, 0.50},
}

// measureSnapshots builds a root disk of rootfs and a snapshot of a machine booted on it (warmed
// by the commands of snapshotCases), then restores n machines per case, runs the command once in
// each and stops it. Each line is restore + first exec, against the floor.
func measureSnapshots(ctx context.Context, d *qemu.Driver, rootfs string, n int, floor Stats) error {
	dir, err := os.MkdirTemp("", "iii-bench-snap-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	disk, file := filepath.Join(dir, "root.ext4"), filepath.Join(dir, "machine.snap")
	t0 := time.Now()
	if err := snapshot.BuildRootDisk(ctx, rootfs, disk); err != nil {
		return err
	}
	diskTime := time.Since(t0)
	spec := vm.Spec{RootDisk: disk, CPUs: 1, MemoryMB: sandboxMemoryMB, ScratchMB: sandboxMemoryMB / 2}
	info, err := d.Snapshot(ctx, spec, file, func(ctx context.Context, m vm.Machine) error {
		for _, c := range snapshotCases {
			if _, err := m.Exec(ctx, vm.ExecRequest{Argv: c.Argv, Timeout: time.Minute}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	st, _ := os.Stat(disk)
	fmt.Printf("snapshot: root disk %d MiB in %s; machine %d MiB in %s (boot %s, warm %s, save %s)\n",
		st.Size()>>20, diskTime.Round(time.Millisecond), info.Size>>20, (info.Boot + info.Warm + info.Save).Round(time.Millisecond),
		info.Boot.Round(time.Millisecond), info.Warm.Round(time.Millisecond), info.Save.Round(time.Millisecond))
	fmt.Printf("targets (issue 28): restore + first exec of shell at most 0.25x the floor, python at most 0.50x\n")
	for _, c := range snapshotCases {
		var ds []time.Duration
		var b Breakdown
		for i := 0; i < n; i++ {
			spec := spec
			spec.StateDir = filepath.Join(dir, fmt.Sprintf("m%d", i))
			t0 := time.Now()
			m, err := d.Restore(ctx, spec, file, info.KernelRelease)
			if err != nil {
				return err
			}
			t1 := time.Now()
			res, err := m.Exec(ctx, vm.ExecRequest{Argv: c.Argv, Timeout: time.Minute})
			dur, execD := time.Since(t0), time.Since(t1)
			_ = m.Stop(ctx)
			<-m.Done()
			if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
				return fmt.Errorf("restored machine: %v: %v %s", c.Argv, err, res.Stderr)
			}
			ds = append(ds, dur)
			if rt, ok := m.(interface{ RestoreTimes() *qemu.RestoreTimes }); ok && rt.RestoreTimes() != nil {
				b.Add(append(rt.RestoreTimes().Phases(), qemu.Phase{Name: "exec", D: execD}))
			}
		}
		s := summarize(ds)
		fmt.Printf("%s %s  %s\n", pad("restore + "+c.Label+":", 44), s, verdict(s, floor, c.Target))
		b.Print(os.Stdout, "the restore")
	}
	return nil
}
