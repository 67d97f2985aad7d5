//go:build linux

package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// TestMain doubles as the helper process of TestOwnerKilled: with III_VM_HELPER_ROOT set it boots
// a machine, prints its PIDs and waits to be killed.
func TestMain(m *testing.M) {
	if targets := os.Getenv("III_NETGUARD_PROBE"); targets != "" {
		os.Exit(netProbe(targets))
	}
	if path := os.Getenv("III_PAGEOUT_MAPPER"); path != "" {
		os.Exit(privateMapper(path))
	}
	if root := os.Getenv("III_VM_HELPER_ROOT"); root != "" {
		os.Exit(helper(root, os.Getenv("III_VM_HELPER_STATE")))
	}
	os.Exit(m.Run())
}

func helper(root, state string) int {
	opt, err := testFirmware(guestarch.Host())
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	d, err := New(opt)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	m, err := d.Boot(context.Background(), vm.Spec{RootFS: root, CPUs: 1, MemoryMB: 128, StateDir: state,
		Network: os.Getenv("III_VM_HELPER_NETWORK") != ""})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	b, _ := json.Marshal(m.PIDs())
	fmt.Println(string(b))
	select {}
}

// processesMentioning lists PIDs whose command line contains s.
func processesMentioning(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone polls until no process mentions s, or fails after the deadline.
func waitGone(t *testing.T, s string, within time.Duration) {
	t.Helper()
	var left []int
	if !enginetest.Poll(within, func() bool { left = processesMentioning(s); return len(left) == 0 }) {
		t.Fatalf("processes still running %s later: %v", within, left)
	}
}

// TestOwnerKilled: a machine's processes die with the process that booted it, also a networked
// machine's qemu, which is forked from a thread of its own (startGuarded).
func TestOwnerKilled(t *testing.T) {
	newDriver(t)
	root := busyboxRoot(t)
	for _, network := range []string{"", "on"} {
		t.Run("network="+network, func(t *testing.T) { ownerKilled(t, root, network) })
	}
}

func ownerKilled(t *testing.T, root, network string) {
	state := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "III_VM_HELPER_ROOT="+root, "III_VM_HELPER_STATE="+state, "III_VM_HELPER_NETWORK="+network)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var pids []int
	if err := json.Unmarshal([]byte(line), &pids); err != nil || len(pids) < 2 {
		t.Fatalf("helper said %q", line)
	}
	if len(processesMentioning(state)) < 2 {
		t.Fatalf("no qemu/virtiofsd found for state dir %s", state)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, state, 10*time.Second)
}

func TestDeadlineAndMounts(t *testing.T) {
	d := newDriver(t)
	root := busyboxRoot(t)
	rw, ro := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "in"), []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	m := boot(t, d, vm.Spec{RootFS: root, StateDir: state, Deadline: 5 * time.Second, Mounts: []vm.Mount{
		{Host: rw, Guest: "/work"},
		{Host: ro, Guest: "/data", ReadOnly: true},
	}})
	res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "cat /data/in && echo out > /work/out && ! touch /data/x 2>/dev/null"}})
	if code(res) != 0 || string(res.Stdout) != "host data" {
		t.Fatalf("exit %d stdout %q stderr %q", code(res), res.Stdout, res.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "out")); err != nil || string(b) != "out\n" {
		t.Fatalf("write through the rw mount: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ro, "x")); err == nil {
		t.Fatal("write through the read-only mount reached the host")
	}
	// The machine's deadline ends it without a Stop.
	select {
	case <-m.Done():
	case <-time.After(40 * time.Second):
		t.Fatal("machine outlived its deadline")
	}
	waitGone(t, state, 5*time.Second)
}
