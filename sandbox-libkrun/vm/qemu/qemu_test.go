//go:build linux

package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
	"golang.org/x/sys/unix"
)

// newDriver returns a driver of the checkout's firmware or skips the test with the reason it
// cannot run; under CI=true a missing prerequisite fails the test instead.
func newDriver(t *testing.T) *Driver {
	t.Helper()
	if testing.Short() {
		t.Skip("VM boots are slow under TCG; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("virtiofsd needs root")
	}
	if _, err := exec.LookPath("busybox"); err != nil {
		cannotRun(t, "busybox (busybox-static) is needed for the test root filesystem")
	}
	opt, err := testFirmware(guestarch.Host())
	if err != nil {
		cannotRun(t, err.Error())
	}
	d, err := New(opt)
	if err != nil {
		cannotRun(t, fmt.Sprintf("no VM driver on this host: %v", err))
	}
	return d
}

// cannotRun skips the test with reason, or fails it under CI=true, where every VM test must run.
func cannotRun(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and this VM test cannot run: %s", reason)
	}
	t.Skip(reason)
}

// testFirmware is the firmware of a that mage builds in this checkout (dist/firmware/<linux
// target>/, from `go tool mage firmware`), so the tests boot the agent of these sources and never
// read a firmware an earlier run installed in ~/.iii/lib.
func testFirmware(a guestarch.Arch) (Options, error) {
	fw := firmware.At(filepath.Join("..", "..", "..", "dist", "firmware", a.Triple))
	if _, err := os.Stat(fw.Manifest); err != nil {
		return Options{}, fmt.Errorf("no firmware built in this checkout for %s (run `go tool mage firmware`): %w", a.Triple, err)
	}
	return Options{Arch: a, Kernel: fw.Kernel, Initrd: fw.Initrd}, nil
}

// brokenInitrd is a driver of the checkout's kernel with an initrd that is not an initramfs.
func brokenInitrd(t *testing.T, timeout time.Duration) *Driver {
	t.Helper()
	opt, err := testFirmware(guestarch.Host())
	if err != nil {
		t.Fatal(err)
	}
	opt.Initrd = filepath.Join(t.TempDir(), "initrd")
	if err := os.WriteFile(opt.Initrd, []byte("not an initramfs"), 0o644); err != nil {
		t.Fatal(err)
	}
	opt.BootTimeout = timeout
	d, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// busyboxRoot builds a tiny root filesystem with a static busybox as /bin/*.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bb, _ := exec.LookPath("busybox")
	for _, d := range []string{"bin", "etc", "tmp", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"sh", "cat", "echo", "uname", "sleep", "head", "yes", "ls", "true", "false", "env", "pwd", "touch", "id", "nc", "printf", "kill", "grep", "mount", "mkdir", "dd", "rm", "test"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", app)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "image-file"), []byte("from the image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func boot(t *testing.T, d *Driver, spec vm.Spec) vm.Machine {
	t.Helper()
	if spec.CPUs == 0 {
		spec.CPUs = 1
	}
	if spec.MemoryMB == 0 {
		spec.MemoryMB = 256
	}
	if spec.StateDir == "" {
		spec.StateDir = t.TempDir()
	}
	spec.ScratchMB = 64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	m, err := d.Boot(ctx, spec)
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	h := m.(interface{ BootInfo() proto.Hello }).BootInfo()
	t.Logf("%s booted in %s (guest: port open at %d ms uptime, modules %d ms)", d.Name(), time.Since(start).Round(time.Millisecond), h.UptimeMS, h.ModulesMS)
	if bt := m.(interface{ BootTimes() BootTimes }).BootTimes(); h.InitMS <= 0 || bt.Ready.Before(bt.Hello) || bt.Hello.Before(bt.QemuStarted) {
		t.Fatalf("boot times out of order or /init time missing: %+v", bt)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	return m
}

func run(t *testing.T, m vm.Machine, req vm.ExecRequest) vm.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := m.Exec(ctx, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	return res
}

func code(r vm.ExecResult) int {
	if r.ExitCode == nil {
		return -1
	}
	return *r.ExitCode
}

func TestMachine(t *testing.T) {
	d := newDriver(t)
	root := busyboxRoot(t)
	state := t.TempDir()
	m := boot(t, d, vm.Spec{RootFS: root, Env: []string{"BASE=base"}, StateDir: state})

	t.Run("kernel", func(t *testing.T) {
		var host unix.Utsname
		_ = unix.Uname(&host)
		res := run(t, m, vm.ExecRequest{Argv: []string{"uname", "-r"}})
		got := strings.TrimSpace(string(res.Stdout))
		if got == "" || got == unix.ByteSliceToString(host.Release[:]) || got != m.KernelRelease() {
			t.Fatalf("guest kernel %q, agent said %q, host %q", got, m.KernelRelease(), unix.ByteSliceToString(host.Release[:]))
		}
	})
	t.Run("kernel RNG seeded at boot", func(t *testing.T) {
		// Without the host's seed the pool holds a bit or two and getrandom() blocks for seconds.
		res := run(t, m, vm.ExecRequest{Argv: []string{"cat", "/proc/sys/kernel/random/entropy_avail"}})
		if n, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout))); n < 256 {
			t.Fatalf("entropy_avail %q", res.Stdout)
		}
	})
	t.Run("exit codes", func(t *testing.T) {
		for _, c := range []struct {
			argv []string
			want int
		}{
			{[]string{"true"}, 0},
			{[]string{"sh", "-c", "exit 7"}, 7},
			{[]string{"no-such-command"}, 127},
			{[]string{"/etc/image-file"}, 126},
		} {
			if got := code(run(t, m, vm.ExecRequest{Argv: c.argv})); got != c.want {
				t.Errorf("%q: exit %d, want %d", c.argv, got, c.want)
			}
		}
	})
	t.Run("stdin env workdir", func(t *testing.T) {
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", `cat; echo "$BASE $CALL"; pwd; echo err >&2`},
			Stdin: []byte("in\n"), Env: []string{"CALL=call"}, Workdir: "/tmp"})
		if string(res.Stdout) != "in\nbase call\n/tmp\n" || string(res.Stderr) != "err\n" {
			t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		res := run(t, m, vm.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 500 * time.Millisecond})
		if !res.TimedOut || res.ExitCode != nil || time.Since(start) > 10*time.Second {
			t.Fatalf("timed_out %v exit %v after %s", res.TimedOut, res.ExitCode, time.Since(start))
		}
	})
	t.Run("cancelled context kills the command", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := m.Exec(ctx, vm.ExecRequest{Argv: []string{"sh", "-c", "echo $$ > /tmp/victim; exec sleep 300"}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("exec under a cancelled context: %v", err)
		}
		if !enginetest.Poll(10*time.Second, func() bool {
			return code(run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "test -s /tmp/victim && ! kill -0 $(cat /tmp/victim) 2>/dev/null"}})) == 0
		}) {
			t.Fatal("the command outlived its cancelled exec")
		}
	})
	t.Run("output cap", func(t *testing.T) {
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "yes | head -c 5000; yes e | head -c 10 >&2"}, OutputCap: 1000})
		if len(res.Stdout) != 1000 || !res.StdoutTruncated || res.StderrTruncated || len(res.Stderr) != 10 {
			t.Fatalf("stdout %d bytes truncated=%v, stderr %d truncated=%v", len(res.Stdout), res.StdoutTruncated, len(res.Stderr), res.StderrTruncated)
		}
	})
	t.Run("default cap is 1 MiB", func(t *testing.T) {
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "yes | head -c 1100000"}})
		if len(res.Stdout) != 1<<20 || !res.StdoutTruncated || code(res) != 0 {
			t.Fatalf("stdout %d bytes truncated=%v exit %d", len(res.Stdout), res.StdoutTruncated, code(res))
		}
	})
	t.Run("concurrent execs", func(t *testing.T) {
		errs := make(chan error, 4)
		for i := 0; i < 4; i++ {
			go func() {
				want := strconv.Itoa(i)
				res, err := m.Exec(context.Background(), vm.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.3; echo $N"}, Env: []string{"N=" + want}})
				if err == nil && strings.TrimSpace(string(res.Stdout)) != want {
					err = fmt.Errorf("exec %s got %q", want, res.Stdout)
				}
				errs <- err
			}()
		}
		for i := 0; i < 4; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("streamed output", func(t *testing.T) {
		var got bytes.Buffer
		res := run(t, m, vm.ExecRequest{Argv: []string{"echo", "hello"}, Output: func(s int, b []byte) {
			if s == 1 {
				got.Write(b)
			}
		}})
		if got.String() != "hello\n" || string(res.Stdout) != "hello\n" {
			t.Fatalf("streamed %q collected %q", got.String(), res.Stdout)
		}
	})
	t.Run("writes stay in the guest", func(t *testing.T) {
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "echo x > /etc/new && echo y > /etc/image-file && cat /etc/new /etc/image-file"}})
		if code(res) != 0 || string(res.Stdout) != "x\ny\n" {
			t.Fatalf("guest write: exit %d %q %q", code(res), res.Stdout, res.Stderr)
		}
		if _, err := os.Stat(filepath.Join(root, "etc", "new")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("guest write reached the host: %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "etc", "image-file")); string(b) != "from the image\n" {
			t.Fatalf("host image file changed to %q", b)
		}
	})
	t.Run("tmp is world-writable and sticky", func(t *testing.T) {
		// The test image's /tmp is 0755; the guest makes it 1777 in its overlay.
		res := run(t, m, vm.ExecRequest{Argv: []string{"ls", "-ld", "/tmp"}})
		if !bytes.HasPrefix(res.Stdout, []byte("drwxrwxrwt")) {
			t.Fatalf("ls -ld /tmp: %q %q", res.Stdout, res.Stderr)
		}
	})
	t.Run("root share is read-only on the host", func(t *testing.T) {
		// A guest root process mounting the virtiofs tag again cannot write through it either.
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p /mnt/r && mount -t virtiofs root /mnt/r; echo pwned > /mnt/r/pwned; mount -o remount,rw /mnt/r; echo pwned > /mnt/r/pwned2"}})
		// The remount to rw succeeds inside the guest; the host's read-only bind refuses the write.
		if !bytes.Contains(res.Stderr, []byte("pwned2: Read-only file system")) {
			t.Fatalf("write after a guest remount,rw was not refused as read-only: %q", res.Stderr)
		}
		for _, f := range []string{"pwned", "pwned2"} {
			if _, err := os.Stat(filepath.Join(root, f)); err == nil {
				t.Fatalf("guest wrote %s into the host root (%q)", f, res.Stderr)
			}
		}
	})
	t.Run("scratch is bounded", func(t *testing.T) {
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "dd if=/dev/zero of=/tmp/big bs=1M count=100"}})
		if code(res) == 0 || !bytes.Contains(res.Stderr, []byte("No space left")) {
			t.Fatalf("100 MB into a 64 MB scratch: exit %d %q", code(res), res.Stderr)
		}
		run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "rm -f /tmp/big"}})
	})
	t.Run("host files invisible", func(t *testing.T) {
		secret := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{secret, "/etc/hostname", "/" + filepath.Base(root) + "/etc/image-file"} {
			res := run(t, m, vm.ExecRequest{Argv: []string{"cat", p}})
			if code(res) == 0 || bytes.Contains(res.Stdout, []byte("host secret")) {
				t.Fatalf("cat %s in the guest: exit %d %q", p, code(res), res.Stdout)
			}
		}
	})
	t.Run("fs ops", func(t *testing.T) {
		ctx := context.Background()
		if _, err := m.FS(ctx, "write", json.RawMessage(`{"path":"/tmp/a/b.txt","content":"hello fs","parents":true}`)); err != nil {
			t.Fatalf("write: %v", err)
		}
		out, err := m.FS(ctx, "read", json.RawMessage(`{"path":"/tmp/a/b.txt"}`))
		if err != nil || !bytes.Contains(out, []byte(`"body":"hello fs"`)) {
			t.Fatalf("read: %s %v", out, err)
		}
		res := run(t, m, vm.ExecRequest{Argv: []string{"cat", "/tmp/a/b.txt"}})
		if string(res.Stdout) != "hello fs" {
			t.Fatalf("exec sees %q", res.Stdout)
		}
		_, err = m.FS(ctx, "read", json.RawMessage(`{"path":"/nope"}`))
		var fe *vm.FSError
		if !errors.As(err, &fe) || fe.Code != "S211" {
			t.Fatalf("read of a missing file: %v", err)
		}
		for _, c := range []struct{ op, req, want string }{
			{"mkdir", `{"path":"/tmp/a/c"}`, `"created":true`},
			{"ls", `{"path":"/tmp/a"}`, `"name":"b.txt"`},
			{"stat", `{"path":"/tmp/a/c"}`, `"is_dir":true`},
			{"grep", `{"path":"/tmp/a","pattern":"H.LLO","ignore_case":true}`, `"line":1`},
			{"sed", `{"path":"/tmp/a","pattern":"fs$","replacement":"vm"}`, `"total_replacements":1`},
			{"mv", `{"src":"/tmp/a/b.txt","dst":"/tmp/a/c/d.txt"}`, `"moved":true`},
			{"chmod", `{"path":"/tmp/a/c/d.txt","mode":"0600"}`, `"updated":1`},
			{"read", `{"path":"/tmp/a/c/d.txt"}`, `"body":"hello vm"`},
			{"rm", `{"path":"/tmp/a","recursive":true}`, `"removed":true`},
		} {
			out, err := m.FS(ctx, c.op, json.RawMessage(c.req))
			if err != nil || !bytes.Contains(out, []byte(c.want)) {
				t.Fatalf("%s %s: %s %v (want %s)", c.op, c.req, out, err, c.want)
			}
		}
	})
	t.Run("background children survive, orphans are reaped", func(t *testing.T) {
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"}})
		pid := strings.TrimSpace(string(res.Stdout))
		if res := run(t, m, vm.ExecRequest{Argv: []string{"kill", "-0", pid}}); code(res) != 0 {
			t.Fatalf("background sleep %s is gone: %q", pid, res.Stderr)
		}
		run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "(true &); (true &); sleep 0.2"}})
		var zombies []byte
		if !enginetest.Poll(15*time.Second, func() bool {
			zombies = run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "grep -l ') Z ' /proc/[0-9]*/stat"}}).Stdout
			return len(bytes.TrimSpace(zombies)) == 0
		}) {
			t.Fatalf("zombies left: %s", zombies)
		}
	})
	t.Run("stop kills every process", func(t *testing.T) {
		pids := m.PIDs()
		if len(pids) < 2 {
			t.Fatalf("PIDs %v: want qemu and virtiofsd", pids)
		}
		if err := m.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-m.Done()
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); err == nil {
				t.Errorf("pid %d still alive after Stop", pid)
			}
		}
		waitGone(t, state, 5*time.Second)
	})
}

func TestBootFailureShowsConsole(t *testing.T) {
	newDriver(t)
	d := brokenInitrd(t, 30*time.Second)
	state := t.TempDir()
	_, err := d.Boot(context.Background(), vm.Spec{RootFS: busyboxRoot(t), CPUs: 1, MemoryMB: 128, StateDir: state})
	if err == nil || !strings.Contains(err.Error(), "VM boot failed") || !strings.Contains(err.Error(), "--- VM console") || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("got %v", err)
	}
	var be *vm.BootError
	if !errors.As(err, &be) || strings.HasPrefix(be.Detail, "VM boot failed") || !strings.Contains(be.Detail, "--- VM console") {
		t.Fatalf("not a *vm.BootError whose detail carries the console: %#v", err)
	}
	waitGone(t, state, 5*time.Second)
	// Without a StateDir the driver uses a temporary one and removes it after the failure.
	root := busyboxRoot(t)
	t.Setenv("TMPDIR", t.TempDir())
	_, err = d.Boot(context.Background(), vm.Spec{RootFS: root, CPUs: 1, MemoryMB: 128})
	if err == nil || !strings.Contains(err.Error(), "VM boot failed") {
		t.Fatalf("boot without a StateDir: %v", err)
	}
	if left := tempStateDirs(t); len(left) > 0 {
		t.Fatalf("temporary state directories left behind: %v", left)
	}
}

func TestFloor(t *testing.T) {
	d := newDriver(t)
	ctx := context.Background()
	// The agent reports the kernel's uptime at /init after its marker: part of the whole.
	if dur, toInit, err := d.FloorBoot(ctx, 256); err != nil || toInit <= 0 || toInit >= dur {
		t.Fatalf("floor: %s, /init at %s, %v", dur, toInit, err)
	}
	broken := brokenInitrd(t, 0)
	if _, err := broken.Floor(ctx, 256); err == nil || !strings.Contains(err.Error(), "never reached /init") {
		t.Fatalf("floor of a kernel that panics: %v", err)
	}
}

// tempStateDirs lists the driver's temporary state directories ($TMPDIR/iii-vm-*).
func tempStateDirs(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "iii-vm-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
