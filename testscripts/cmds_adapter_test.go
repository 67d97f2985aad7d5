package testscripts

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/rogpeppe/go-internal/testscript"
)

// The adapter scenarios boot real microVMs only where the host can: qemu, virtiofsd and the VM
// firmware (kernel + initramfs) in the real ~/.iii/lib. [vm] also needs the python preset in the
// real ~/.iii/cache. `vmhome` links both into the scenario's fake HOME.
func init() {
	registerCond("vmhost", func() (bool, error) { return vmHost() == "", nil })
	registerCond("vm", func() (bool, error) { return vmHost() == "" && len(cachedImages("iiidev")) > 0, nil })
	registerCmd("vmhome", cmdVMHome)
	registerCmd("vmpids", cmdVMPids)
	registerCmd("waitcall", cmdWaitCall)
	registerSetup(func(env *testscript.Env) error {
		reason := vmHost()
		if reason == "" && len(cachedImages("iiidev")) == 0 {
			reason = "the python/node presets are not in ~/.iii/cache (go tool mage images)"
		}
		env.Setenv("VM_SKIP_REASON", reason)
		return nil
	})
}

// realHome is the HOME of the test process, before scenarios get their fake one.
var realHome = sync.OnceValue(func() string {
	h, _ := os.UserHomeDir()
	return h
})

// vmFirmware are the firmware files the qemu driver boots.
var vmFirmware = []string{"iii-vm-vmlinux", "iii-vm-initramfs.cpio"}

// vmHost returns why this host cannot boot the adapter's VMs, or "" when it can.
var vmHost = sync.OnceValue(func() string {
	qemu := os.Getenv("III_QEMU")
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	if _, err := exec.LookPath(qemu); err != nil {
		return "qemu is not installed (" + qemu + ")"
	}
	vfs := os.Getenv("III_VIRTIOFSD")
	if vfs == "" {
		vfs = "/usr/lib/qemu/virtiofsd"
	}
	if _, err := os.Stat(vfs); err != nil {
		return "virtiofsd is not installed (" + vfs + ")"
	}
	for _, f := range vmFirmware {
		if _, err := os.Stat(filepath.Join(realHome(), ".iii", "lib", f)); err != nil {
			return "the VM firmware is not in ~/.iii/lib (go tool mage firmware)"
		}
	}
	return ""
})

// cachedImages lists cache entries of the real ~/.iii/cache whose name contains substr and that
// hold a root filesystem.
func cachedImages(substr string) []string {
	dir := filepath.Join(realHome(), ".iii", "cache")
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if !strings.Contains(e.Name(), substr) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "rootfs", "bin")); err == nil {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// vmhome: link the real VM firmware (~/.iii/lib) and the cached preset images (~/.iii/cache)
// into the scenario's fake HOME, so the adapter finds them where it looks.
func cmdVMHome(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: vmhome")
	}
	home := ts.Getenv("HOME")
	lib := filepath.Join(home, ".iii", "lib")
	cache := filepath.Join(home, ".iii", "cache")
	ts.Check(os.MkdirAll(lib, 0o755))
	ts.Check(os.MkdirAll(cache, 0o755))
	for _, f := range append(vmFirmware, "iii-vm-firmware.json") {
		src := filepath.Join(realHome(), ".iii", "lib", f)
		if _, err := os.Stat(src); err == nil {
			ts.Check(os.Symlink(src, filepath.Join(lib, f)))
		}
	}
	for _, img := range cachedImages("iiidev") {
		ts.Check(os.Symlink(img, filepath.Join(cache, filepath.Base(img))))
	}
}

// vmpids [-timeout=20s] FILE SUBSTRING: wait until at least one live process has SUBSTRING in
// its command line (e.g. a sandbox's state directory) and write their PIDs to FILE, one per line.
// ! vmpids: wait until there is none.
func cmdVMPids(ts *testscript.TestScript, neg bool, args []string) {
	d, rest := timeoutFlag(ts, "vmpids", args, 20*time.Second)
	if len(rest) != 2 {
		ts.Fatalf("usage: vmpids [-timeout=D] FILE SUBSTRING")
	}
	var pids []string
	ok := poll(d, func() bool {
		pids = processesWith(rest[1])
		return (len(pids) > 0) != neg
	})
	if !ok && neg {
		ts.Fatalf("vmpids: processes still running for %q after %v: %v", rest[1], d, pids)
	}
	if !ok {
		ts.Fatalf("vmpids: no process for %q after %v", rest[1], d)
	}
	ts.Check(os.WriteFile(ts.MkAbs(rest[0]), []byte(strings.Join(pids, "\n")+"\n"), 0o644))
}

// processesWith returns the PIDs of live processes whose command line contains substr.
func processesWith(substr string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), substr) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// waitcall [-timeout=30s] FN PATH VALUE: call FN in the default namespace at $III_URL with {}
// until the reply's PATH reads VALUE (compared as json ==); the last reply is then stdout.
func cmdWaitCall(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("waitcall", flag.ContinueOnError)
	d := fs.Duration("timeout", 30*time.Second, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 3 {
		ts.Fatalf("usage: waitcall [-timeout=D] FN PATH VALUE")
	}
	fn, path, want := fs.Arg(0), fs.Arg(1), fs.Arg(2)
	url := ts.Getenv("III_URL")
	if url == "" {
		ts.Fatalf("waitcall: III_URL is not set")
	}
	file := ts.MkAbs(".waitcall.json")
	last := ""
	var w *protocol.Worker
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	ok := poll(*d, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if w == nil {
			c, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "waitcall", Namespace: protocol.DefaultNamespace, NoReconnect: true, TokenFile: os.DevNull})
			if err != nil {
				last = err.Error()
				return false
			}
			w = c
		}
		out, err := w.Call(ctx, fn, map[string]any{})
		if err != nil {
			last = err.Error()
			w.Close()
			w = nil
			return false
		}
		last = string(out)
		ts.Check(os.WriteFile(file, out, 0o644))
		v, found := readJSONPath(ts, file, path)
		return found && jsonText(v) == want
	})
	if !ok {
		ts.Fatalf("waitcall: %s %s is not %s after %v (last: %s)", fn, path, want, *d, last)
	}
	ts.Stdout().Write([]byte(last))
}
