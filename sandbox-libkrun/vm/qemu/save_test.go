//go:build linux

package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// TestSaveRunning saves a running machine (restored from an image snapshot) that has written a
// file and runs a counter, and restores two copies of it: each sees the file and the counter
// still counting from where it was, draws its own random bytes and keeps its writes to itself,
// while the saved machine goes on.
func TestSaveRunning(t *testing.T) {
	d := newDriver(t)
	dir := t.TempDir()
	disk := filepath.Join(dir, "root.ext4")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := snapshot.BuildRootDisk(ctx, busyboxRoot(t), disk); err != nil {
		t.Fatal(err)
	}
	spec := vm.Spec{RootDisk: disk, CPUs: 1, MemoryMB: 256, ScratchMB: 64, Env: []string{"SAVED=yes"}}
	image := vm.SnapshotFiles{Machine: filepath.Join(dir, "machine.snap"), RAM: filepath.Join(dir, "ram.img")}
	info, err := d.Snapshot(ctx, spec, image, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := spec
	ps.StateDir = t.TempDir()
	parent, err := d.Restore(ctx, ps, image, info.KernelRelease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Stop(context.Background()) })
	run(t, parent, vm.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /tmp/f"}})
	p, _, err := parent.(vm.Processes).StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/c.t; mv /tmp/c.t /tmp/c; sleep 0.1; done"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	counter := func(m vm.Machine) int {
		res := run(t, m, vm.ExecRequest{Argv: []string{"cat", "/tmp/c"}})
		n, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
		return n
	}
	enginetest.Eventually(t, "the counter to reach 3", time.Minute, func() bool { return counter(parent) >= 3 })

	out := t.TempDir()
	files := vm.SnapshotFiles{Machine: filepath.Join(out, "machine.snap"), RAM: filepath.Join(out, "ram.img")}
	saved, sinfo, err := d.Save(ctx, parent, files)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saved: %d MiB on disk, paused %s, done in %s", sinfo.Size>>20, sinfo.Paused.Round(time.Millisecond), sinfo.Save.Round(time.Millisecond))
	// The save read every page of the parent's RAM file; it keeps of them little more than its
	// guest touches again.
	rss, anon := mappingMemory(t, parent.(*machine).qemu.pid(), image.RAM)
	t.Logf("the parent's RAM mapping after the save: %d MiB resident, %d MiB of it written", rss>>20, anon>>20)
	if rss-anon > 64<<20 {
		t.Errorf("the parent holds %d MiB of its 256 MiB RAM file's pages after the save; want them paged out", (rss-anon)>>20)
	}
	at := counter(parent)
	for _, f := range []string{files.Machine, files.RAM} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("snapshot file %s: %v", f, err)
		}
	}
	if saved.RootDisk != disk || saved.MemoryMB != 256 || saved.ScratchMB != 64 || len(saved.Env) != 1 {
		t.Fatalf("saved spec %+v", saved)
	}
	// The parent goes on.
	enginetest.Eventually(t, "the parent's counter to go on after the save", time.Minute, func() bool { return counter(parent) > at })

	var rand []string
	for i := range 2 {
		cs := saved
		cs.StateDir = t.TempDir()
		cs.Hostname = "copy-" + strconv.Itoa(i)
		c, err := d.Restore(ctx, cs, files, sinfo.KernelRelease)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		res := run(t, c, vm.ExecRequest{Argv: []string{"sh", "-c", "cat /tmp/f; hostname; echo $SAVED; od -An -N16 -tx1 /dev/urandom"}})
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(lines) != 4 || lines[0] != "kept" || lines[1] != cs.Hostname || lines[2] != "yes" {
			t.Fatalf("copy %d: %q (stderr %q)", i, res.Stdout, res.Stderr)
		}
		rand = append(rand, lines[3])
		first := counter(c)
		if first < 3 {
			t.Fatalf("copy %d: the counter is at %d, saved at 3 or more", i, first)
		}
		enginetest.Eventually(t, "the copy's counter to go on", time.Minute, func() bool { return counter(c) > first })
		list, err := c.(vm.Processes).ListProcesses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, q := range list {
			found = found || (q.ID == p.ID && q.Exit == nil)
		}
		if !found {
			t.Fatalf("copy %d: process %s not running in %+v", i, p.ID, list)
		}
		run(t, c, vm.ExecRequest{Argv: []string{"sh", "-c", "echo " + strconv.Itoa(i) + " > /tmp/f"}})
	}
	if rand[0] == rand[1] {
		t.Fatalf("both copies drew %s", rand[0])
	}
	if got := strings.TrimSpace(string(run(t, parent, vm.ExecRequest{Argv: []string{"cat", "/tmp/f"}}).Stdout)); got != "kept" {
		t.Fatalf("the parent's file is %q after the copies wrote theirs", got)
	}

	// Parked, the parent's machine ends; restored, its counter goes on from where it was.
	parked := t.TempDir()
	pfiles := vm.SnapshotFiles{Machine: filepath.Join(parked, "machine.snap"), RAM: filepath.Join(parked, "ram.img")}
	before := counter(parent)
	pspec, pinfo, err := d.Park(ctx, parent, pfiles)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-parent.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a parked machine is still running")
	}
	// Nothing maps a parked machine's RAM: it is in its stream, and no RAM file is made.
	if _, err := os.Stat(pfiles.RAM); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a park wrote a RAM file (%v)", err)
	}
	pspec.StateDir = t.TempDir()
	start := time.Now()
	back, err := d.Restore(ctx, pspec, vm.SnapshotFiles{Machine: pfiles.Machine}, pinfo.KernelRelease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = back.Stop(context.Background()) })
	t.Logf("parked in %s (stopped after %s, a stream of %d MiB), restored in %s", pinfo.Save.Round(time.Millisecond), pinfo.Paused.Round(time.Millisecond), pinfo.Size>>20, time.Since(start).Round(time.Millisecond))
	resumed := counter(back)
	if resumed < before || resumed > before+20 {
		t.Fatalf("parked at %d or a little more, restored at %d", before, resumed)
	}
	enginetest.Eventually(t, "the restored counter to go on", time.Minute, func() bool { return counter(back) > resumed })
}
