package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// snapshotCases are the commands timed in machines restored from a snapshot, with the targets
// a snapshot restore must meet (ratio to the floor).
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
	img, err := newImageSnapshot(ctx, d, rootfs, "iii-bench-snap-", func(ctx context.Context, m vm.Machine) error {
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
	defer os.RemoveAll(img.dir)
	dir, spec, file, info := img.dir, img.spec, img.files, img.info
	st, _ := os.Stat(img.disk)
	fmt.Printf("snapshot: root disk %d MiB in %s; machine %d MiB in %s (boot %s, warm %s, save %s)\n",
		st.Size()>>20, img.diskTime.Round(time.Millisecond), info.Size>>20, (info.Boot + info.Warm + info.Save).Round(time.Millisecond),
		info.Boot.Round(time.Millisecond), info.Warm.Round(time.Millisecond), info.Save.Round(time.Millisecond))
	fmt.Printf("targets (from a snapshot): restore + first exec of shell at most 0.25x the floor, python at most 0.50x\n")
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
				return fmt.Errorf("restored machine: %v: %w %s", c.Argv, err, res.Stderr)
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
	return idleMemory(ctx, d, spec, file, info.KernelRelease, rootfs, filepath.Join(dir, "mem"))
}

// idleMemory prints the host memory of a machine restored from file and of one booted on rootfs
// as a sandbox boots with snapshots off (over a file share), each idle after one python run:
// the resident set of every host process behind it (qemu, virtiofsd), with its target.
func idleMemory(ctx context.Context, d *qemu.Driver, spec vm.Spec, file vm.SnapshotFiles, release, rootfs, dir string) error {
	if runtime.GOOS != "linux" {
		fmt.Println("host memory, idle machine: not measured (it reads Linux's /proc)")
		return nil
	}
	idle := func(m vm.Machine, err error) (int64, error) {
		if err != nil {
			return 0, err
		}
		defer func() { _ = m.Stop(ctx); <-m.Done() }()
		if _, err := m.Exec(ctx, vm.ExecRequest{Argv: []string{"python3", "-c", "pass"}, Timeout: time.Minute}); err != nil {
			return 0, err
		}
		return residentKiB(m.PIDs())
	}
	r := spec
	r.StateDir = filepath.Join(dir, "restored")
	restored, err := idle(d.Restore(ctx, r, file, release))
	if err != nil {
		return fmt.Errorf("restored machine: %w", err)
	}
	b := vm.Spec{RootFS: rootfs, CPUs: spec.CPUs, MemoryMB: spec.MemoryMB, ScratchMB: spec.ScratchMB, StateDir: filepath.Join(dir, "booted")}
	booted, err := idle(d.Boot(ctx, b))
	if err != nil {
		return fmt.Errorf("booted machine: %w", err)
	}
	fmt.Printf("%s restored %d MiB, booted %d MiB  (target: restored at most booted, %s)\n",
		pad(fmt.Sprintf("host memory, idle machine (%d MiB):", spec.MemoryMB), 44), restored>>10, booted>>10, met(restored <= booted))
	return nil
}

// imageSnapshot is a root disk of a rootfs and the snapshot of a machine booted on it, in a
// temporary directory of their own: what the snapshot and fork sections restore from.
type imageSnapshot struct {
	dir      string        // the temporary directory, which the caller removes
	disk     string        // the root disk
	diskTime time.Duration // building the root disk
	spec     vm.Spec       // the machine: one CPU and a sandbox's memory on the root disk
	files    vm.SnapshotFiles
	info     vm.SnapshotInfo
}

// newImageSnapshot builds an imageSnapshot of rootfs in a new directory named after pattern
// (os.MkdirTemp), the machine warmed by warm before it is saved. On error the directory is
// removed.
func newImageSnapshot(ctx context.Context, d *qemu.Driver, rootfs, pattern string, warm func(context.Context, vm.Machine) error) (*imageSnapshot, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, err
	}
	img := &imageSnapshot{dir: dir, disk: filepath.Join(dir, "root.ext4"),
		files: vm.SnapshotFiles{Machine: filepath.Join(dir, "machine.snap"), RAM: filepath.Join(dir, "ram.img")}}
	t0 := time.Now()
	if err := snapshot.BuildRootDisk(ctx, rootfs, img.disk); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	img.diskTime = time.Since(t0)
	img.spec = vm.Spec{RootDisk: img.disk, CPUs: 1, MemoryMB: sandboxMemoryMB, ScratchMB: sandboxMemoryMB / 2}
	if img.info, err = d.Snapshot(ctx, img.spec, img.files, warm); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return img, nil
}

// restorable is what restores a machine from the image snapshot.
func (img *imageSnapshot) restorable() restorable {
	return restorable{img.spec, img.files, img.info.KernelRelease}
}

// met is how a target's verdict ends a line: "met" or "NOT met".
func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// residentKiB sums VmRSS over pids (Linux's /proc).
func residentKiB(pids []int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/%d/status: VmRSS %q", pid, v)
				}
				sum += kb
			}
		}
	}
	return sum, nil
}
