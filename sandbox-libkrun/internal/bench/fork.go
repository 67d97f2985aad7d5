package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

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
	img, err := newImageSnapshot(ctx, d, rootfs, "iii-bench-fork-", func(ctx context.Context, m vm.Machine) error {
		_, err := m.Exec(ctx, vm.ExecRequest{Argv: []string{"python3", "-c", "pass"}, Timeout: time.Minute})
		return err
	})
	if err != nil {
		return err
	}
	defer os.RemoveAll(img.dir)
	b := &forkBench{ctx: ctx, d: d, img: img, n: n, floor: floor}
	parent, err := b.restore(img.restorable())
	if err != nil {
		return err
	}
	defer b.stop(parent)
	if err := b.fillHeap(parent); err != nil {
		return err
	}

	// The fork: save the parent (it goes on), restore 8 copies at once, one exec in each.
	fmt.Printf("targets (snapshots of running sandboxes): fork of %d usable within 0.25x the floor, parent + %d copies' memory at most 2x a booted sandbox's, create from a user snapshot at most the image snapshot's +10%%, pause then resume within 0.25x the floor, a paused sandbox at most 16 MiB\n", forkChildren, forkChildren)
	children, user, err := b.fork(parent)
	if err != nil {
		return err
	}
	if runtime.GOOS == "linux" {
		if err := b.forkMemory(rootfs, parent, children); err != nil {
			return err
		}
	}
	for _, c := range children {
		b.stop(c)
	}
	if err := b.createFromUser(user); err != nil {
		return err
	}
	return b.pauseResume()
}

// forkBench is what the steps of forkSection share: the image snapshot, in whose directory
// each restored machine gets a state directory of its own, and the run's count and floor.
type forkBench struct {
	ctx   context.Context
	d     *qemu.Driver
	img   *imageSnapshot
	n     int
	floor Stats
	seq   int // machines given a state directory so far
}

// restorable is a snapshot and what restores it: the machine's spec and its kernel release.
type restorable struct {
	spec    vm.Spec
	files   vm.SnapshotFiles
	release string
}

// nextStateDir is the state directory of the next machine restored.
func (b *forkBench) nextStateDir() string {
	b.seq++
	return filepath.Join(b.img.dir, "m"+strconv.Itoa(b.seq))
}

// restore restores a machine from r, in a state directory of its own.
func (b *forkBench) restore(r restorable) (vm.Machine, error) {
	s := r.spec
	s.StateDir = b.nextStateDir()
	return b.d.Restore(b.ctx, s, r.files, r.release)
}

// stop stops m and waits for it to end.
func (b *forkBench) stop(m vm.Machine) { _ = m.Stop(b.ctx); <-m.Done() }

// execTrue runs `true` in m: a machine that answers it is usable.
func (b *forkBench) execTrue(m vm.Machine) error {
	res, err := m.Exec(b.ctx, vm.ExecRequest{Argv: []string{"true"}, Timeout: time.Minute})
	if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
		err = fmt.Errorf("true: %s", res.Stderr)
	}
	return err
}

// fillHeap starts forkHeap in parent and waits until its objects exist.
func (b *forkBench) fillHeap(parent vm.Machine) error {
	if _, _, err := parent.(vm.Processes).StartProcess(b.ctx, vm.ProcessRequest{Argv: []string{"python3", "-c", forkHeap}}, nil); err != nil {
		return err
	}
	for {
		res, err := parent.Exec(b.ctx, vm.ExecRequest{Argv: []string{"test", "-e", "/tmp/ready"}})
		if err != nil {
			return err
		}
		if res.ExitCode != nil && *res.ExitCode == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fork saves parent and restores forkChildren copies of it at once, each until it answered
// `true`, n times, and prints the times. It returns the copies of the last round, still
// running, and the last snapshot.
func (b *forkBench) fork(parent vm.Machine) ([]vm.Machine, restorable, error) {
	var forks []time.Duration
	var saveB Breakdown
	var children []vm.Machine
	var user restorable
	for i := 0; i < b.n; i++ {
		for _, c := range children {
			b.stop(c)
		}
		children = nil
		sdir := filepath.Join(b.img.dir, "fork"+strconv.Itoa(i))
		if err := os.Mkdir(sdir, 0o700); err != nil {
			return nil, user, err
		}
		user.files = vm.SnapshotFiles{Machine: filepath.Join(sdir, "machine.snap"), RAM: filepath.Join(sdir, "ram.img"), Transient: true}
		t0 := time.Now()
		s, sinfo, err := b.d.Save(b.ctx, parent, user.files)
		if err != nil {
			return nil, user, err
		}
		user.spec, user.release = s, sinfo.KernelRelease
		saved := time.Since(t0)
		ms := make([]vm.Machine, forkChildren)
		errs := make([]error, forkChildren)
		var wg sync.WaitGroup
		for k := range ms {
			cs := s
			cs.StateDir = b.nextStateDir()
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ms[k], errs[k] = b.d.Restore(b.ctx, cs, user.files, sinfo.KernelRelease); errs[k] == nil {
					errs[k] = b.execTrue(ms[k])
				}
			}()
		}
		wg.Wait()
		forks = append(forks, time.Since(t0))
		saveB.Add([]qemu.Phase{{Name: "parent paused", D: sinfo.Paused}, {Name: "split into RAM file + devices", D: saved - sinfo.Paused},
			{Name: fmt.Sprintf("%d restores + true, at once", forkChildren), D: time.Since(t0) - saved}})
		for k, m := range ms {
			if m != nil {
				children = append(children, m)
			}
			if errs[k] != nil {
				for _, c := range children {
					b.stop(c)
				}
				return nil, user, fmt.Errorf("fork copy %d: %w", k, errs[k])
			}
		}
	}
	fs := summarize(forks)
	fmt.Printf("%s %s  %s\n", pad(fmt.Sprintf("fork of %d (python, ~100 MiB of objects):", forkChildren), 44), fs, verdict(fs, b.floor, 0.25))
	saveB.Print(os.Stdout, "the fork")
	return children, user, nil
}

// forkMemory prints the host memory of parent and its copies (PSS: what they share counts
// once) against one sandbox booted on rootfs (Linux's /proc).
func (b *forkBench) forkMemory(rootfs string, parent vm.Machine, children []vm.Machine) error {
	pids := parent.PIDs()
	for _, c := range children {
		pids = append(pids, c.PIDs()...)
	}
	pss, err := proportionalKiB(pids)
	if err != nil {
		return err
	}
	booted, err := bootedKiB(b.ctx, b.d, rootfs, b.img.spec, filepath.Join(b.img.dir, "booted"))
	if err != nil {
		return err
	}
	fmt.Printf("%s parent + %d copies %d MiB (PSS), one booted sandbox %d MiB (RSS)  (target: at most 2x, %.2fx, %s)\n",
		pad("host memory, fork:", 44), forkChildren, pss>>10, booted>>10, float64(pss)/float64(booted), met(pss <= 2*booted))
	return nil
}

// createFromUser times a create from the user snapshot against one from the image's
// snapshot: restore, then `true`.
func (b *forkBench) createFromUser(user restorable) error {
	var fromImage, fromUser []time.Duration
	for i := 0; i < b.n; i++ {
		for _, c := range []struct {
			out *[]time.Duration
			restorable
		}{{&fromImage, b.img.restorable()}, {&fromUser, user}} {
			t0 := time.Now()
			m, err := b.restore(c.restorable)
			if err != nil {
				return err
			}
			err = b.execTrue(m)
			*c.out = append(*c.out, time.Since(t0))
			b.stop(m)
			if err != nil {
				return err
			}
		}
	}
	is, us := summarize(fromImage), summarize(fromUser)
	fmt.Printf("%s %s  %s\n", pad("restore + true, image snapshot:", 44), is, verdict(is, b.floor, 0.25))
	fmt.Printf("%s %s  (%+.0f%% of the image snapshot's: target at most +10%%, %s)\n", pad("restore + true, user snapshot:", 44), us,
		100*(float64(us.Median)/float64(is.Median)-1), met(float64(us.Median) <= 1.1*float64(is.Median)))
	return nil
}

// pauseResume times a pause then resume of an idle sandbox: park it, restore it, one exec.
func (b *forkBench) pauseResume() error {
	idle, err := b.restore(b.img.restorable())
	if err != nil {
		return err
	}
	var cycles []time.Duration
	for i := 0; i < b.n; i++ {
		pdir := filepath.Join(b.img.dir, "pause"+strconv.Itoa(i))
		if err := os.Mkdir(pdir, 0o700); err != nil {
			b.stop(idle)
			return err
		}
		files := vm.SnapshotFiles{Machine: filepath.Join(pdir, "machine.snap"), RAM: filepath.Join(pdir, "ram.img"), Transient: true}
		t0 := time.Now()
		ps, pinfo, err := b.d.Park(b.ctx, idle, files)
		if err != nil {
			b.stop(idle)
			return err
		}
		if len(idle.PIDs()) != 0 {
			return fmt.Errorf("a parked machine has processes left: %v", idle.PIDs())
		}
		if idle, err = b.restore(restorable{ps, files, pinfo.KernelRelease}); err != nil {
			return err
		}
		if err := b.execTrue(idle); err != nil {
			b.stop(idle)
			return err
		}
		cycles = append(cycles, time.Since(t0))
	}
	b.stop(idle)
	cs := summarize(cycles)
	fmt.Printf("%s %s  %s\n", pad("pause then resume (idle) + true:", 44), cs, verdict(cs, b.floor, 0.25))
	fmt.Printf("%s 0 MiB: its qemu has ended, the machine is files on disk (target at most 16 MiB, met)\n", pad("host memory, paused sandbox:", 44))
	return nil
}

// bootedKiB is the resident set of a sandbox booted on rootfs over a file share (snapshots off),
// idle after one python run.
func bootedKiB(ctx context.Context, d *qemu.Driver, rootfs string, spec vm.Spec, state string) (int64, error) {
	m, err := d.Boot(ctx, vm.Spec{RootFS: rootfs, CPUs: spec.CPUs, MemoryMB: spec.MemoryMB, ScratchMB: spec.ScratchMB, StateDir: state})
	return idleKiB(ctx, m, err)
}

// proportionalKiB sums Pss over pids (Linux's /proc/<pid>/smaps_rollup): pages shared between
// the processes count once in all.
func proportionalKiB(pids []int) (int64, error) { return procKiB(pids, "smaps_rollup", "Pss") }
