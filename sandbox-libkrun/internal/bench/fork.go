package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// forkChildren is how many copies the fork line makes.
const forkChildren = 8

// forkHeap is the python program the forked sandbox runs: about 100 MiB of Python objects,
// held while it sleeps, /tmp/ready written once they exist.
const forkHeap = "import time\nx = [('%08d' % i) * 12 for i in range(900000)]\nopen('/tmp/ready', 'w').close()\ntime.sleep(1e9)\n"

// forkSection measures the snapshots of running sandboxes against the floor: a fork of a
// python sandbox holding ~100 MiB of objects into 8 copies until each answered a first exec,
// and the host memory of the 9; a create from such a snapshot against one from the image's
// snapshot; a pause then resume, and what a paused sandbox holds. The machines are the
// driver's, as the adapter's sandbox::fork, create {snapshot_id}, pause and resume use it.
func forkSection(ctx context.Context, d *qemu.Driver, rootfs string, n int, floor Stats) error {
	dir, err := os.MkdirTemp("", "iii-bench-fork-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	disk := filepath.Join(dir, "root.ext4")
	if err := snapshot.BuildRootDisk(ctx, rootfs, disk); err != nil {
		return err
	}
	spec := vm.Spec{RootDisk: disk, CPUs: 1, MemoryMB: sandboxMemoryMB, ScratchMB: sandboxMemoryMB / 2}
	image := vm.SnapshotFiles{Machine: filepath.Join(dir, "machine.snap"), RAM: filepath.Join(dir, "ram.img")}
	info, err := d.Snapshot(ctx, spec, image, func(ctx context.Context, m vm.Machine) error {
		_, err := m.Exec(ctx, vm.ExecRequest{Argv: []string{"python3", "-c", "pass"}, Timeout: time.Minute})
		return err
	})
	if err != nil {
		return err
	}
	seq := 0
	restore := func(s vm.Spec, files vm.SnapshotFiles, release string) (vm.Machine, error) {
		seq++
		s.StateDir = filepath.Join(dir, "m"+strconv.Itoa(seq))
		return d.Restore(ctx, s, files, release)
	}
	stop := func(m vm.Machine) { _ = m.Stop(ctx); <-m.Done() }
	execTrue := func(m vm.Machine) error {
		res, err := m.Exec(ctx, vm.ExecRequest{Argv: []string{"true"}, Timeout: time.Minute})
		if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
			err = fmt.Errorf("true: %s", res.Stderr)
		}
		return err
	}

	parent, err := restore(spec, image, info.KernelRelease)
	if err != nil {
		return err
	}
	defer stop(parent)
	if _, _, err := parent.(vm.Processes).StartProcess(ctx, vm.ProcessRequest{Argv: []string{"python3", "-c", forkHeap}}, nil); err != nil {
		return err
	}
	for {
		res, err := parent.Exec(ctx, vm.ExecRequest{Argv: []string{"test", "-e", "/tmp/ready"}})
		if err != nil {
			return err
		}
		if res.ExitCode != nil && *res.ExitCode == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The fork: save the parent (it goes on), restore 8 copies at once, one exec in each.
	fmt.Printf("targets (snapshots of running sandboxes): fork of %d usable within 0.25x the floor, parent + %d copies' memory at most 2x a booted sandbox's, create from a user snapshot at most the image snapshot's +10%%, pause then resume within 0.25x the floor, a paused sandbox at most 16 MiB\n", forkChildren, forkChildren)
	var forks []time.Duration
	var saveB Breakdown
	var children []vm.Machine
	var user vm.SnapshotFiles
	var userSpec vm.Spec
	var userRelease string
	for i := 0; i < n; i++ {
		for _, c := range children {
			stop(c)
		}
		children = nil
		sdir := filepath.Join(dir, "fork"+strconv.Itoa(i))
		if err := os.Mkdir(sdir, 0o700); err != nil {
			return err
		}
		user = vm.SnapshotFiles{Machine: filepath.Join(sdir, "machine.snap"), RAM: filepath.Join(sdir, "ram.img"), Transient: true}
		t0 := time.Now()
		s, sinfo, err := d.Save(ctx, parent, user)
		if err != nil {
			return err
		}
		userSpec, userRelease = s, sinfo.KernelRelease
		saved := time.Since(t0)
		ms := make([]vm.Machine, forkChildren)
		errs := make([]error, forkChildren)
		var wg sync.WaitGroup
		for k := range ms {
			cs := s
			seq++
			cs.StateDir = filepath.Join(dir, "m"+strconv.Itoa(seq))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ms[k], errs[k] = d.Restore(ctx, cs, user, sinfo.KernelRelease); errs[k] == nil {
					errs[k] = execTrue(ms[k])
				}
			}()
		}
		wg.Wait()
		forks = append(forks, time.Since(t0))
		saveB.Add([]qemu.Phase{{Name: "parent paused, its stream loaded by the splitting qemu", D: sinfo.Paused}, {Name: "devices saved + RAM file finished", D: saved - sinfo.Paused},
			{Name: fmt.Sprintf("%d restores + true, at once", forkChildren), D: time.Since(t0) - saved}})
		for k, m := range ms {
			if m != nil {
				children = append(children, m)
			}
			if errs[k] != nil {
				for _, c := range children {
					stop(c)
				}
				return fmt.Errorf("fork copy %d: %w", k, errs[k])
			}
		}
	}
	fs := summarize(forks)
	fmt.Printf("%s %s  %s\n", pad(fmt.Sprintf("fork of %d (python, ~100 MiB of objects):", forkChildren), 44), fs, verdict(fs, floor, 0.25))
	saveB.Print(os.Stdout, "the fork")
	bootedPSS, err := forkMemory(ctx, d, rootfs, spec, filepath.Join(dir, "booted"), parent, children)
	if err != nil {
		return err
	}
	for _, c := range children {
		stop(c)
	}
	if err := forkBound(ctx, d, filepath.Join(dir, "bound"), n, spec, image, info.KernelRelease, execTrue, stop, floor, bootedPSS); err != nil {
		return err
	}

	// A create from the user snapshot against one from the image's snapshot.
	var fromImage, fromUser []time.Duration
	for i := 0; i < n; i++ {
		for _, c := range []struct {
			out     *[]time.Duration
			spec    vm.Spec
			files   vm.SnapshotFiles
			release string
		}{{&fromImage, spec, image, info.KernelRelease}, {&fromUser, userSpec, user, userRelease}} {
			t0 := time.Now()
			m, err := restore(c.spec, c.files, c.release)
			if err != nil {
				return err
			}
			err = execTrue(m)
			*c.out = append(*c.out, time.Since(t0))
			stop(m)
			if err != nil {
				return err
			}
		}
	}
	is, us := summarize(fromImage), summarize(fromUser)
	mark := "met"
	if float64(us.Median) > 1.1*float64(is.Median) {
		mark = "NOT met"
	}
	fmt.Printf("%s %s  %s\n", pad("restore + true, image snapshot:", 44), is, verdict(is, floor, 0.25))
	fmt.Printf("%s %s  (%+.0f%% of the image snapshot's: target at most +10%%, %s)\n", pad("restore + true, user snapshot:", 44), us,
		100*(float64(us.Median)/float64(is.Median)-1), mark)

	return pauseSection(ctx, d, dir, n, restore, spec, image, info.KernelRelease, execTrue, stop, floor)
}

// forkMemory prints the host memory of a fork's parent and copies (RSS and PSS sums) against one
// booted sandbox's, and the parent's apart; it returns the booted sandbox's PSS in KiB, or 0 where
// the host has no PSS (not Linux).
func forkMemory(ctx context.Context, d *qemu.Driver, rootfs string, spec vm.Spec, state string, parent vm.Machine, children []vm.Machine) (int64, error) {
	if runtime.GOOS != "linux" {
		return 0, nil
	}
	pids := parent.PIDs()
	for _, c := range children {
		pids = append(pids, c.PIDs()...)
	}
	rss, err := residentKiB(pids)
	if err != nil {
		return 0, err
	}
	pss, err := proportionalKiB(pids)
	if err != nil {
		return 0, err
	}
	bootedRSS, bootedPSS, err := bootedKiB(ctx, d, rootfs, spec, state)
	if err != nil {
		return 0, err
	}
	mark := "met"
	if pss > 2*bootedPSS {
		mark = "NOT met"
	}
	fmt.Printf("%s parent + %d copies PSS %d MiB (RSS %d MiB), one booted sandbox PSS %d MiB (RSS %d MiB)  (target: PSS at most 2x, %.2fx, %s)\n",
		pad("host memory, fork:", 44), forkChildren, pss>>10, rss>>10, bootedPSS>>10, bootedRSS>>10, float64(pss)/float64(bootedPSS), mark)
	// The save reads every page of the parent's RAM, so its private mapping of the image's RAM
	// file holds every page afterwards (clean page cache, the file's holes too), counted
	// wholly in its PSS: said apart, it is what keeps the sum above the copies' bound.
	parentPSS, err := proportionalKiB(parent.PIDs())
	if err != nil {
		return 0, err
	}
	parentFile, err := rollupKiB(parent.PIDs(), "Pss_File:")
	if err != nil {
		return 0, err
	}
	fmt.Printf("%s PSS %d MiB, of which %d MiB file pages (its image RAM mapping, every page read by the save); the %d copies PSS %d MiB\n",
		pad("host memory, fork's parent:", 44), parentPSS>>10, parentFile>>10, forkChildren, (pss-parentPSS)>>10)
	return bootedPSS, nil
}

// pauseSection measures pause then resume of an idle sandbox restored from the image's snapshot:
// park it (its whole stream, no RAM file), restore it from that stream, one exec; each apart,
// with the phases that bound them.
func pauseSection(ctx context.Context, d *qemu.Driver, dir string, n int, restore func(vm.Spec, vm.SnapshotFiles, string) (vm.Machine, error),
	spec vm.Spec, image vm.SnapshotFiles, release string, execTrue func(vm.Machine) error, stop func(vm.Machine), floor Stats) error {
	idle, err := restore(spec, image, release)
	if err != nil {
		return err
	}
	var pauses, resumes, cycles []time.Duration
	var pauseB Breakdown
	var stream int64
	for i := 0; i < n; i++ {
		pdir := filepath.Join(dir, "pause"+strconv.Itoa(i))
		if err := os.Mkdir(pdir, 0o700); err != nil {
			stop(idle)
			return err
		}
		files := vm.SnapshotFiles{Machine: filepath.Join(pdir, "machine.snap"), RAM: filepath.Join(pdir, "ram.img"), Transient: true}
		t0 := time.Now()
		ps, pinfo, err := d.Park(ctx, idle, files)
		if err != nil {
			stop(idle)
			return err
		}
		parked := time.Since(t0)
		if len(idle.PIDs()) != 0 {
			return fmt.Errorf("a parked machine has processes left: %v", idle.PIDs())
		}
		stream = pinfo.Size
		t1 := time.Now()
		if idle, err = restore(ps, vm.SnapshotFiles{Machine: files.Machine}, pinfo.KernelRelease); err != nil {
			return err
		}
		restored := time.Since(t1)
		if err := execTrue(idle); err != nil {
			stop(idle)
			return err
		}
		pauses, resumes, cycles = append(pauses, parked), append(resumes, time.Since(t1)), append(cycles, time.Since(t0))
		phases := []qemu.Phase{{Name: "stop+save", D: pinfo.Paused}, {Name: "qemu end", D: parked - pinfo.Paused}}
		if rt, ok := idle.(interface{ RestoreTimes() *qemu.RestoreTimes }); ok && rt.RestoreTimes() != nil {
			phases = append(phases, rt.RestoreTimes().Phases()...)
		}
		pauseB.Add(append(phases, qemu.Phase{Name: "true", D: time.Since(t1) - restored}))
	}
	stop(idle)
	ps, rs, cs := summarize(pauses), summarize(resumes), summarize(cycles)
	fmt.Printf("%s %s  (%.2fx the floor; a stream of %d MiB)\n", pad("pause (idle):", 44), ps, float64(ps.Median)/float64(floor.Median), stream>>20)
	fmt.Printf("%s %s  (%.2fx the floor)\n", pad("resume (idle) + true:", 44), rs, float64(rs.Median)/float64(floor.Median))
	fmt.Printf("%s %s  %s\n", pad("pause then resume (idle) + true:", 44), cs, verdict(cs, floor, 0.25))
	pauseB.Print(os.Stdout, "pause then resume")
	fmt.Printf("%s 0 MiB: its qemu has ended, the machine is files on disk (target at most 16 MiB, met)\n", pad("host memory, paused sandbox:", 44))
	return nil
}

// bootedKiB is the resident set and the proportional set (PSS) of a sandbox booted on rootfs over
// a file share (snapshots off), idle after one python run.
func bootedKiB(ctx context.Context, d *qemu.Driver, rootfs string, spec vm.Spec, state string) (rss, pss int64, err error) {
	m, err := d.Boot(ctx, vm.Spec{RootFS: rootfs, CPUs: spec.CPUs, MemoryMB: spec.MemoryMB, ScratchMB: spec.ScratchMB, StateDir: state})
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = m.Stop(ctx); <-m.Done() }()
	if _, err := m.Exec(ctx, vm.ExecRequest{Argv: []string{"python3", "-c", "pass"}, Timeout: time.Minute}); err != nil {
		return 0, 0, err
	}
	if rss, err = residentKiB(m.PIDs()); err != nil {
		return 0, 0, err
	}
	pss, err = proportionalKiB(m.PIDs())
	return rss, pss, err
}

// forkBound measures what any fork of forkChildren costs on this machine at the least: as many
// copies restored at once from the image's snapshot (nothing to save first, every page already
// in a RAM file), until each answered a first exec. Above the fork's target, that target cannot
// be met here, whatever the save costs. With bootedPSS (KiB, Linux) it also prints the PSS of
// those idle copies: a fork's parent and copies cannot take less than one such copy each.
func forkBound(ctx context.Context, d *qemu.Driver, dir string, n int, spec vm.Spec, image vm.SnapshotFiles, release string,
	execTrue func(vm.Machine) error, stop func(vm.Machine), floor Stats, bootedPSS int64) error {
	var runs []time.Duration
	var copiesPSS int64
	for i := 0; i < n; i++ {
		ms := make([]vm.Machine, forkChildren)
		errs := make([]error, forkChildren)
		specs := make([]vm.Spec, forkChildren)
		for k := range specs {
			specs[k] = spec
			specs[k].StateDir = filepath.Join(dir, strconv.Itoa(i)+"-"+strconv.Itoa(k))
		}
		t0 := time.Now()
		var wg sync.WaitGroup
		for k := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, err := d.Restore(ctx, specs[k], image, release)
				if ms[k], errs[k] = m, err; err == nil {
					errs[k] = execTrue(m)
				}
			}()
		}
		wg.Wait()
		runs = append(runs, time.Since(t0))
		var pids []int
		for _, m := range ms {
			if m != nil {
				pids = append(pids, m.PIDs()...)
			}
		}
		if bootedPSS > 0 && len(pids) > 0 {
			copiesPSS, _ = proportionalKiB(pids)
		}
		for _, m := range ms {
			if m != nil {
				stop(m)
			}
		}
		for k, err := range errs {
			if err != nil {
				return fmt.Errorf("bound copy %d: %w", k, err)
			}
		}
	}
	bs := summarize(runs)
	note := "the fork target is within this machine's reach"
	if r := float64(bs.Median) / float64(floor.Median); r > 0.25 {
		note = fmt.Sprintf("the fork target (0.25x) cannot be met under %s on %d cores: restoring %d copies alone takes %.2fx", d.Accel(), runtime.NumCPU(), forkChildren, r)
	}
	fmt.Printf("%s %s  (%.2fx the floor; %s)\n", pad(fmt.Sprintf("bound: %d restores from the image + true:", forkChildren), 44), bs,
		float64(bs.Median)/float64(floor.Median), note)
	if bootedPSS > 0 && copiesPSS > 0 {
		each := copiesPSS / forkChildren
		least := each * (forkChildren + 1)
		note := "the memory target is within reach"
		if least > 2*bootedPSS {
			note = "the fork's memory target (2x) cannot be met: that much is each qemu's own"
		}
		fmt.Printf("%s PSS %d MiB, %d MiB each: a parent + %d copies at least %d MiB, %.2fx a booted sandbox's PSS (%s)\n",
			pad(fmt.Sprintf("bound: %d idle copies' memory:", forkChildren), 44), copiesPSS>>10, each>>10, forkChildren, least>>10,
			float64(least)/float64(bootedPSS), note)
	}
	return nil
}

// proportionalKiB sums Pss over pids (Linux's /proc/<pid>/smaps_rollup): pages shared between
// the processes count once in all.
func proportionalKiB(pids []int) (int64, error) { return rollupKiB(pids, "Pss:") }

// rollupKiB sums the field (e.g. "Pss:") of /proc/<pid>/smaps_rollup over pids.
func rollupKiB(pids []int, field string) (int64, error) {
	var sum int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			return 0, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, field); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/%d/smaps_rollup: %s %q", pid, field, v)
				}
				sum += kb
			}
		}
	}
	return sum, nil
}
