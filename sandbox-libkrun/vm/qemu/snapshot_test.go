//go:build linux

package qemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// TestSnapshotRestore saves a machine booted on a root disk and restores two machines from it:
// each runs commands, reads its own random bytes, has the host's clock and keeps its writes to
// itself. With the python preset in the cache it is the root (and python's first run is timed).
func TestSnapshotRestore(t *testing.T) {
	d := newDriver(t)
	root := busyboxRoot(t)
	python := false
	if r, ok := image.NewCache(image.DefaultDir(os.Getenv)).RootFS("docker.io/iiidev/python:latest"); ok && os.Getenv("III_TEST_SNAPSHOT_PYTHON") != "" {
		root, python = r, true
	}
	dir := t.TempDir()
	disk := filepath.Join(dir, "root.ext4")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := snapshot.BuildRootDisk(ctx, root, disk); err != nil {
		t.Fatal(err)
	}
	t.Logf("root disk built in %s", time.Since(start).Round(time.Millisecond))
	spec := vm.Spec{RootDisk: disk, CPUs: 1, MemoryMB: 512, ScratchMB: 64}
	file := vm.SnapshotFiles{Machine: filepath.Join(dir, "machine.snap"), RAM: filepath.Join(dir, "ram.img")}
	var procID string // a process running when the machine is saved, in every copy after
	info, err := d.Snapshot(ctx, spec, file, func(ctx context.Context, m vm.Machine) error {
		p, _, err := m.(vm.Processes).StartProcess(ctx, vm.ProcessRequest{Argv: []string{"sh", "-c", "echo before; exec sleep 600"}}, nil)
		if err != nil {
			return err
		}
		procID = p.ID
		argvs := [][]string{{"sh", "-c", "true"}}
		if python {
			argvs = append(argvs, []string{"python3", "-c", "pass"})
		}
		for _, argv := range argvs {
			if _, err := m.Exec(ctx, vm.ExecRequest{Argv: argv, Timeout: time.Minute}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot: %d MiB, boot %s, warm %s, save %s", info.Size>>20, info.Boot.Round(time.Millisecond), info.Warm.Round(time.Millisecond), info.Save.Round(time.Millisecond))
	for _, f := range []string{file.Machine, file.RAM} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("snapshot file %s: %v, mode %v", f, err, st.Mode())
		}
	}
	if st, _ := os.Stat(file.RAM); st.Size() != int64(spec.MemoryMB)<<20 || info.Size >= st.Size() {
		t.Fatalf("RAM file: %d bytes, %d of the snapshot on disk: want the machine's %d MiB, sparse", st.Size(), info.Size, spec.MemoryMB)
	}
	ramSum := func() [sha256.Size]byte {
		b, err := os.ReadFile(file.RAM)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	saved := ramSum()
	var rand [][]byte
	for i := range 2 {
		spec := spec
		spec.StateDir = t.TempDir()
		spec.Hostname = "sbx-" + strconv.Itoa(i)
		start := time.Now()
		m, err := d.Restore(ctx, spec, file, info.KernelRelease)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		restored := time.Since(start)
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "true"}})
		shell := time.Since(start)
		var phases []string
		for _, p := range m.(interface{ RestoreTimes() *RestoreTimes }).RestoreTimes().Phases() {
			phases = append(phases, p.Name+" "+p.D.Round(time.Millisecond).String())
		}
		t.Logf("restore %d: ready in %s (%s), sh -c true done at %s", i, restored.Round(time.Millisecond), strings.Join(phases, ", "), shell.Round(time.Millisecond))
		if python {
			t0 := time.Now()
			res := run(t, m, vm.ExecRequest{Argv: []string{"python3", "-c", "print(1)"}, Timeout: time.Minute})
			t.Logf("restore %d: python3 print(1) %s (exit %d)", i, time.Since(t0).Round(time.Millisecond), code(res))
		}
		if code(res) != 0 {
			t.Fatalf("sh -c true: exit %d", code(res))
		}
		// The restored agent named its revision in Resume's reply, and its process table is
		// the saved one: the process started before the save is there, with its output.
		pm := m.(vm.Processes)
		a, err := pm.AttachProcess(ctx, procID, vm.AttachOptions{})
		if err != nil {
			t.Fatalf("restore %d: attach to the saved process: %v", i, err)
		}
		var before bytes.Buffer
		readUntil(t, a.Stdout(), &before, "before\n")
		if err := pm.SignalProcess(ctx, procID, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if _, _, ex := readAll(t, a); ex.Signal != int(syscall.SIGTERM) {
			t.Fatalf("restore %d: the saved process ended %+v, want by SIGTERM", i, ex)
		}
		if kib := residentKiB(t, m.PIDs()[0]); kib >= int64(spec.MemoryMB)<<10 {
			t.Fatalf("restore %d: qemu holds %d MiB, the whole RAM of the machine (%d MiB): the load made untouched pages resident", i, kib>>10, spec.MemoryMB)
		}
		res = run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "head -c 32 /dev/urandom; cat /proc/sys/kernel/hostname; ls /tmp; echo " + strconv.Itoa(i) + " > /tmp/mine; date +%s"}})
		out := res.Stdout
		if len(out) < 32 {
			t.Fatalf("restore %d: output %q stderr %q", i, out, res.Stderr)
		}
		rand = append(rand, out[:32])
		lines := strings.Fields(string(out[32:]))
		if len(lines) != 2 || lines[0] != spec.Hostname {
			t.Fatalf("restore %d: hostname and files %q (want only %s and the date: a copy sees another's /tmp?)", i, lines, spec.Hostname)
		}
		sec, _ := strconv.ParseInt(lines[1], 10, 64)
		if skew := time.Now().Unix() - sec; skew < -2 || skew > 2 {
			t.Fatalf("restore %d: guest clock %d is %d s off the host's", i, sec, skew)
		}
	}
	if ramSum() != saved {
		t.Fatal("the saved RAM changed while copies ran: a copy's writes reached the file")
	}
	if bytes.Equal(rand[0], rand[1]) {
		t.Fatalf("two machines restored from one snapshot read the same /dev/urandom bytes %x", rand[0])
	}
}

// residentKiB reads the VmRSS of pid.
func residentKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kib
		}
	}
	t.Fatalf("/proc/%d/status has no VmRSS", pid)
	return 0
}
