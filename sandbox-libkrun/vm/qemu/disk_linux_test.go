//go:build linux

package qemu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// A machine with a state disk keeps the guest's writes outside its mounts across a stop and a
// new boot, while /run and /tmp are memory (tmpfs) and a full disk fails the guest's write with
// ENOSPC; an image made larger between boots gives the guest the room. The Init phase with the
// disk is logged next to the same machine's without one.
func TestMachineStateDisk(t *testing.T) {
	d := newDriver(t)
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
			if _, serr := os.Stat(p); serr == nil {
				mkfs, err = p, nil
			}
		}
	}
	if err != nil {
		cannotRun(t, "mkfs.ext4 (e2fsprogs) is needed to format the state disk")
	}
	root := busyboxRoot(t)
	disk := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 32<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-t", "ext4", "-m", "0", "-E", "root_owner=0:0", disk).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v: %s", err, out)
	}
	sh := func(m vm.Machine, script string) vm.ExecResult {
		return run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", script}})
	}
	initPhase := func(m vm.Machine) time.Duration {
		bt := m.(interface{ BootTimes() BootTimes }).BootTimes()
		return bt.Ready.Sub(bt.Hello)
	}

	plain := boot(t, d, vm.Spec{RootFS: root})
	plainInit := initPhase(plain)
	_ = plain.Stop(context.Background())

	m := boot(t, d, vm.Spec{RootFS: root, Disk: disk})
	t.Logf("Init (mounts): %s with the state disk, %s without", initPhase(m).Round(time.Millisecond), plainInit.Round(time.Millisecond))
	res := sh(m, "mkdir -p /opt && echo kept > /opt/marker && mount | grep -cE ' on /(run|tmp) type tmpfs'; "+
		"dd if=/dev/zero of=/opt/fill bs=1M count=64 2>&1; echo dd=$?; rm -f /opt/fill")
	out := string(res.Stdout)
	if !strings.HasPrefix(strings.TrimSpace(out), "2") || !strings.Contains(out, "No space left on device") || !strings.Contains(out, "dd=1") {
		t.Fatalf("first boot: want /run and /tmp on tmpfs and ENOSPC from dd, got %q (stderr %q)", out, res.Stderr)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The image grows from 32 to 64 MiB between the boots: the guest grows the file system, so
	// 40 MiB now fit.
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	m = boot(t, d, vm.Spec{RootFS: root, Disk: disk})
	defer m.Stop(context.Background())
	res = sh(m, "cat /opt/marker; dd if=/dev/zero of=/opt/big bs=1M count=40 2>/dev/null; echo dd=$?")
	if got := strings.Fields(string(res.Stdout)); len(got) != 2 || got[0] != "kept" || got[1] != "dd=0" {
		t.Fatalf("second boot: want the marker and room for 40 MiB, got %q (stderr %q)", res.Stdout, res.Stderr)
	}
}
