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
	last, err := b.fork(parent)
	if err != nil {
		return err
	}
	bootedPSS, err := b.forkMemory(rootfs, parent, last.children)
	if err != nil {
		return err
	}
	for _, c := range last.children {
		b.stop(c)
	}
	if err := b.forkBound(bootedPSS); err != nil {
		return err
	}
	if err := b.createFromUser(last.user); err != nil {
		return err
	}
	return b.pauseResume()
}

// forkBench is what the steps of forkSection share: the image snapshot, in whose directory
// every machine gets a state directory of its own, and the run's count and floor.
type forkBench struct {
	ctx   context.Context
	d     *qemu.Driver
	img   *imageSnapshot
	n     int
	floor Stats
	seq   int // machines given a numbered state directory so far
}

// restorable is a snapshot and what restores it: the machine's spec and its kernel release.
type restorable struct {
	spec    vm.Spec
	files   vm.SnapshotFiles
	release string
}

// nextStateDir is the state directory of the next machine restored: numbered, so that no two
// machines of the section share one.
func (b *forkBench) nextStateDir() string {
	b.seq++
	return filepath.Join(b.img.dir, "m"+strconv.Itoa(b.seq))
}

// restore restores a machine from r in the next state directory.
func (b *forkBench) restore(r restorable) (vm.Machine, error) {
	s := r.spec
	s.StateDir = b.nextStateDir()
	return b.d.Restore(b.ctx, s, r.files, r.release)
}

// stop stops m and waits for its end.
func (b *forkBench) stop(m vm.Machine) { _ = m.Stop(b.ctx); <-m.Done() }

// execTrue runs `true` in m: a machine that answers it is usable.
func (b *forkBench) execTrue(m vm.Machine) error {
	res, err := m.Exec(b.ctx, vm.ExecRequest{Argv: []string{"true"}, Timeout: time.Minute})
	if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
		err = fmt.Errorf("true: %s", res.Stderr)
	}
	return err
}

// fillHeap starts forkHeap in parent and waits until its objects exist, so that the fork
// copies a sandbox holding them.
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

// fork forks parent n times (forkOnce) and prints the times with their phases. It returns the
// last round, its copies still running: createFromUser restores its snapshot.
func (b *forkBench) fork(parent vm.Machine) (forkRound, error) {
	var forks []time.Duration
	var saveB Breakdown
	var last forkRound
	for i := 0; i < b.n; i++ {
		for _, c := range last.children {
			b.stop(c)
		}
		r, err := b.forkOnce(parent, i)
		if err != nil {
			return forkRound{}, err
		}
		forks = append(forks, r.took)
		saveB.Add(r.phases)
		last = r
	}
	fs := summarize(forks)
	fmt.Printf("%s %s  %s\n", pad(fmt.Sprintf("fork of %d (python, ~100 MiB of objects):", forkChildren), 44), fs, verdict(fs, b.floor, 0.25))
	saveB.Print(os.Stdout, "the fork")
	return last, nil
}

// forkRound is one fork of a parent: its snapshot, the copies restored from it, the time from
// the save's start until the last copy answered, and the phases of that time.
type forkRound struct {
	user     restorable
	children []vm.Machine
	took     time.Duration
	phases   []qemu.Phase
}

// forkOnce is round i of the fork: it saves parent (which goes on) into a snapshot of its own,
// then restores forkChildren copies of it at once, each until it answered `true`. On a copy's
// error it stops the copies before it.
func (b *forkBench) forkOnce(parent vm.Machine, i int) (forkRound, error) {
	var r forkRound
	sdir := filepath.Join(b.img.dir, "fork"+strconv.Itoa(i))
	if err := os.Mkdir(sdir, 0o700); err != nil {
		return r, err
	}
	r.user.files = vm.SnapshotFiles{Machine: filepath.Join(sdir, "machine.snap"), RAM: filepath.Join(sdir, "ram.img"), Transient: true}
	t0 := time.Now()
	s, sinfo, err := b.d.Save(b.ctx, parent, r.user.files)
	if err != nil {
		return r, err
	}
	r.user.spec, r.user.release = s, sinfo.KernelRelease
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
			if ms[k], errs[k] = b.d.Restore(b.ctx, cs, r.user.files, sinfo.KernelRelease); errs[k] == nil {
				errs[k] = b.execTrue(ms[k])
			}
		}()
	}
	wg.Wait()
	r.took = time.Since(t0)
	r.phases = []qemu.Phase{{Name: "parent paused, its stream loaded by the splitting qemu", D: sinfo.Paused}, {Name: "devices saved + RAM file finished", D: saved - sinfo.Paused},
		{Name: fmt.Sprintf("%d restores + true, at once", forkChildren), D: time.Since(t0) - saved}}
	for k, m := range ms {
		if m != nil {
			r.children = append(r.children, m)
		}
		if errs[k] != nil {
			for _, c := range r.children {
				b.stop(c)
			}
			return forkRound{}, fmt.Errorf("fork copy %d: %w", k, errs[k])
		}
	}
	return r, nil
}

// forkMemory prints the host memory of a fork's parent and copies (RSS and PSS sums) against one
// booted sandbox's, and the parent's apart; it returns the booted sandbox's PSS in KiB, or 0 where
// the host has no PSS (not Linux).
func (b *forkBench) forkMemory(rootfs string, parent vm.Machine, children []vm.Machine) (int64, error) {
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
	bootedRSS, bootedPSS, err := bootedKiB(b.ctx, b.d, rootfs, b.img.spec, filepath.Join(b.img.dir, "booted"))
	if err != nil {
		return 0, err
	}
	fmt.Printf("%s parent + %d copies PSS %d MiB (RSS %d MiB), one booted sandbox PSS %d MiB (RSS %d MiB)  (target: PSS at most 2x, %.2fx, %s)\n",
		pad("host memory, fork:", 44), forkChildren, pss>>10, rss>>10, bootedPSS>>10, bootedRSS>>10, float64(pss)/float64(bootedPSS), met(pss <= 2*bootedPSS))
	// The parent's PSS said apart: what its guest wrote is private to it (the copies share the
	// fork's RAM file instead), and the file pages its save read are given back after the save
	// (vm/qemu releaseFileRAM), so its file pages should be few.
	parentPSS, err := proportionalKiB(parent.PIDs())
	if err != nil {
		return 0, err
	}
	parentFile, err := rollupKiB(parent.PIDs(), "Pss_File:")
	if err != nil {
		return 0, err
	}
	fmt.Printf("%s PSS %d MiB, of which %d MiB file pages (its image RAM mapping; the rest is what its guest wrote); the %d copies PSS %d MiB\n",
		pad("host memory, fork's parent:", 44), parentPSS>>10, parentFile>>10, forkChildren, (pss-parentPSS)>>10)
	return bootedPSS, nil
}

// forkBound measures what any fork of forkChildren costs on this machine at the least: as many
// copies restored at once from the image's snapshot (nothing to save first, every page already
// in a RAM file), until each answered a first exec. Above the fork's target, that target cannot
// be met here, whatever the save costs. With bootedPSS (KiB, Linux) it also prints the PSS of
// those idle copies: a fork's parent and copies cannot take less than one such copy each.
func (b *forkBench) forkBound(bootedPSS int64) error {
	var runs []time.Duration
	var copiesPSS int64
	var measure *int64
	if bootedPSS > 0 {
		measure = &copiesPSS
	}
	for i := 0; i < b.n; i++ {
		took, err := b.boundOnce(i, measure)
		if err != nil {
			return err
		}
		runs = append(runs, took)
	}
	bs := summarize(runs)
	note := "the fork target is within this machine's reach"
	if r := float64(bs.Median) / float64(b.floor.Median); r > 0.25 {
		note = fmt.Sprintf("the fork target (0.25x) cannot be met under %s on %d cores: restoring %d copies alone takes %.2fx", b.d.Accel(), runtime.NumCPU(), forkChildren, r)
	}
	fmt.Printf("%s %s  (%.2fx the floor; %s)\n", pad(fmt.Sprintf("bound: %d restores from the image + true:", forkChildren), 44), bs,
		float64(bs.Median)/float64(b.floor.Median), note)
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

// boundOnce is round i of forkBound: forkChildren copies restored at once from the image's
// snapshot, each until it answered `true`, then stopped. It returns the time until the last
// answered; with pss non-nil it sets *pss to the copies' PSS sum (KiB) while they are idle.
func (b *forkBench) boundOnce(i int, pss *int64) (time.Duration, error) {
	ms := make([]vm.Machine, forkChildren)
	errs := make([]error, forkChildren)
	specs := make([]vm.Spec, forkChildren)
	for k := range specs {
		specs[k] = b.img.spec
		specs[k].StateDir = filepath.Join(b.img.dir, "bound", strconv.Itoa(i)+"-"+strconv.Itoa(k))
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for k := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := b.d.Restore(b.ctx, specs[k], b.img.files, b.img.info.KernelRelease)
			if ms[k], errs[k] = m, err; err == nil {
				errs[k] = b.execTrue(m)
			}
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	var pids []int
	for _, m := range ms {
		if m != nil {
			pids = append(pids, m.PIDs()...)
		}
	}
	if pss != nil && len(pids) > 0 {
		*pss, _ = proportionalKiB(pids)
	}
	for _, m := range ms {
		if m != nil {
			b.stop(m)
		}
	}
	for k, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("bound copy %d: %w", k, err)
		}
	}
	return took, nil
}

// createFromUser times a create from the user snapshot against one from the image's snapshot:
// restore, then `true`, alternately, n times each.
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

// pauseResume measures pause then resume of an idle sandbox restored from the image's snapshot,
// n times (pauseOnce), each apart and the two together, with the phases that bound them.
func (b *forkBench) pauseResume() error {
	idle, err := b.restore(b.img.restorable())
	if err != nil {
		return err
	}
	var pauses, resumes, cycles []time.Duration
	var pauseB Breakdown
	var stream int64
	for i := 0; i < b.n; i++ {
		r, err := b.pauseOnce(idle, i)
		if err != nil {
			return err
		}
		idle, stream = r.idle, r.stream
		pauses, resumes, cycles = append(pauses, r.pause), append(resumes, r.resume), append(cycles, r.cycle)
		pauseB.Add(r.phases)
	}
	b.stop(idle)
	ps, rs, cs := summarize(pauses), summarize(resumes), summarize(cycles)
	fmt.Printf("%s %s  (%.2fx the floor; a stream of %d MiB)\n", pad("pause (idle):", 44), ps, float64(ps.Median)/float64(b.floor.Median), stream>>20)
	fmt.Printf("%s %s  (%.2fx the floor)\n", pad("resume (idle) + true:", 44), rs, float64(rs.Median)/float64(b.floor.Median))
	fmt.Printf("%s %s  %s\n", pad("pause then resume (idle) + true:", 44), cs, verdict(cs, b.floor, 0.25))
	pauseB.Print(os.Stdout, "pause then resume")
	fmt.Printf("%s 0 MiB: its qemu has ended, the machine is files on disk (target at most 16 MiB, met)\n", pad("host memory, paused sandbox:", 44))
	return nil
}

// pauseRound is one pause then resume: the machine resumed, the times of the pause, of the
// resume with its first exec and of both, their phases, and the size of the parked stream.
type pauseRound struct {
	idle                 vm.Machine
	pause, resume, cycle time.Duration
	phases               []qemu.Phase
	stream               int64
}

// pauseOnce is round i of pauseResume: it parks idle (its whole stream, no RAM file), restores
// it from that stream and runs `true` in it. On error no machine of the round is left running.
func (b *forkBench) pauseOnce(idle vm.Machine, i int) (pauseRound, error) {
	pdir := filepath.Join(b.img.dir, "pause"+strconv.Itoa(i))
	if err := os.Mkdir(pdir, 0o700); err != nil {
		b.stop(idle)
		return pauseRound{}, err
	}
	files := vm.SnapshotFiles{Machine: filepath.Join(pdir, "machine.snap"), RAM: filepath.Join(pdir, "ram.img"), Transient: true}
	t0 := time.Now()
	ps, pinfo, err := b.d.Park(b.ctx, idle, files)
	if err != nil {
		b.stop(idle)
		return pauseRound{}, err
	}
	parked := time.Since(t0)
	if len(idle.PIDs()) != 0 {
		return pauseRound{}, fmt.Errorf("a parked machine has processes left: %v", idle.PIDs())
	}
	t1 := time.Now()
	resumed, err := b.restore(restorable{ps, vm.SnapshotFiles{Machine: files.Machine}, pinfo.KernelRelease})
	if err != nil {
		return pauseRound{}, err
	}
	restored := time.Since(t1)
	if err := b.execTrue(resumed); err != nil {
		b.stop(resumed)
		return pauseRound{}, err
	}
	r := pauseRound{idle: resumed, pause: parked, resume: time.Since(t1), cycle: time.Since(t0), stream: pinfo.Size}
	r.phases = []qemu.Phase{{Name: "stop+save", D: pinfo.Paused}, {Name: "qemu end", D: parked - pinfo.Paused}}
	if rt, ok := resumed.(interface{ RestoreTimes() *qemu.RestoreTimes }); ok && rt.RestoreTimes() != nil {
		r.phases = append(r.phases, rt.RestoreTimes().Phases()...)
	}
	r.phases = append(r.phases, qemu.Phase{Name: "true", D: time.Since(t1) - restored})
	return r, nil
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
