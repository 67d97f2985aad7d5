package testscripts

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/hostsetup"
	"github.com/iii-go/iii/internal/release"
	"github.com/rogpeppe/go-internal/testscript"
)

// The adapter scenarios boot real microVMs: qemu and virtiofsd on the host, the VM firmware the
// adapter under test carries (firmware/ beside it, from `go tool mage firmware`) and, for [vm],
// the python/node presets in the real ~/.iii/cache (`go tool mage images`); `go tool mage test`
// prepares all of it. [vmaarch64] adds aarch64 guests: qemu-system-aarch64, the aarch64 firmware
// the adapter carries (firmware-aarch64/ on an x86_64 host, where they run under emulation) and
// the aarch64 presets (~/.iii/cache/aarch64/ there). `vmhome` links the presets of both
// architectures into the scenario's fake HOME; the adapter installs its firmware there itself.
// Every scenario gets III_SANDBOX_ACCELERATOR: tcg where the KVM device is absent, auto where it
// exists (hostsetup.Accelerator). With CI=true a missing prerequisite fails the scenario instead
// of skipping it.
func init() {
	registerBinary(binary{name: "iii-vmbuild", pkg: "./sandbox-libkrun/cmd/iii-vmbuild", version: "0.0.0-test"})
	registerCond("vmhost", func() (bool, error) { return ciCond("VM", vmHost()) })
	registerCond("vm", func() (bool, error) { return ciCond("VM", vmReason()) })
	registerCond("vmaarch64", func() (bool, error) { return ciCond("VM", aarch64Reason()) })
	registerCmd("vmhome", cmdVMHome)
	registerCmd("vmpids", cmdVMPids)
	registerCmd("waitcall", cmdWaitCall)
	registerCmd("unprivileged", cmdUnprivileged)
	registerCmd("sharedhome", cmdSharedHome)
	registerCond("root", func() (bool, error) { return os.Geteuid() == 0, nil })
	registerSetup(func(env *testscript.Env) error {
		env.Setenv("VM_SKIP_REASON", vmReason())
		env.Setenv("VM_AARCH64_SKIP_REASON", aarch64Reason())
		accel, _ := hostsetup.Accelerator()
		env.Setenv("III_SANDBOX_ACCELERATOR", accel)
		env.Setenv("VM_ACCEL", accel)
		return nil
	})
}

// ciCond turns why a condition of the what scenarios does not hold into its value; under
// CI=true a reason is an error, so such a scenario fails with it instead of skipping.
func ciCond(what, reason string) (bool, error) {
	if reason != "" && os.Getenv("CI") == "true" {
		return false, fmt.Errorf("CI=true and this host cannot run the %s scenarios: %s (run `go tool mage setup`)", what, reason)
	}
	return reason == "", nil
}

// vmReason is why [vm] is false, or "".
func vmReason() string {
	if r := vmHost(); r != "" {
		return r
	}
	if len(presetImages(hostArch())) == 0 {
		return "the python/node presets are not in ~/.iii/cache (go tool mage images)"
	}
	return ""
}

// hostArch is this host's guest architecture (uname -m).
func hostArch() string {
	arch, _, _ := strings.Cut(platform.Host(os.Getenv).Triple, "-")
	return arch
}

// aarch64Reason is why [vmaarch64] is false, or "".
func aarch64Reason() string {
	if r := vmReason(); r != "" {
		return r
	}
	if _, err := exec.LookPath("qemu-system-aarch64"); err != nil {
		return "qemu-system-aarch64 is not installed (apt-get install qemu-system-arm; go tool mage setup)"
	}
	fw := filepath.Join(filepath.Dir(adapterFirmware()), carriedFirmware("aarch64"))
	if _, err := os.Stat(filepath.Join(fw, "iii-vm-firmware.json")); err != nil {
		return "the adapter under test carries no aarch64 VM firmware in " + fw + " (go tool mage firmware)"
	}
	if len(presetImages("aarch64")) == 0 {
		return "the aarch64 python/node presets are not in ~/.iii/cache/aarch64 (go tool mage images)"
	}
	return ""
}

// carriedFirmware is the directory beside the adapter that carries the firmware of guest
// architecture arch: firmware for this host's, firmware-<arch> for another.
func carriedFirmware(arch string) string {
	if arch == hostArch() {
		return release.FirmwareDir
	}
	return release.FirmwareDir + "-" + arch
}

// realHome is the HOME of the test process, before scenarios get their fake one.
var realHome = sync.OnceValue(func() string {
	h, _ := os.UserHomeDir()
	return h
})

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
	if _, err := os.Stat(filepath.Join(adapterFirmware(), "iii-vm-firmware.json")); err != nil {
		return "the adapter under test carries no VM firmware in " + adapterFirmware() + " (go tool mage firmware)"
	}
	return ""
})

// adapterFirmware is the firmware directory beside the adapter binary under test (links
// resolved), the one it installs into ~/.iii/lib at start.
func adapterFirmware() string {
	exe := filepath.Join(binDir, "sandbox-libkrun")
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Join(filepath.Dir(exe), release.FirmwareDir)
}

// presetImages lists the preset cache entries of guest architecture arch in the real
// ~/.iii/cache, as iii-vmbuild reports them ("NAME PATH" lines).
func presetImages(arch string) map[string]string {
	presetMu.Lock()
	defer presetMu.Unlock()
	if images, ok := presetCache[arch]; ok {
		return images
	}
	images := map[string]string{}
	out, err := exec.Command(filepath.Join(binDir, "iii-vmbuild"), "presets", "-arch", arch, "-cache", filepath.Join(realHome(), ".iii", "cache")).Output()
	if err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if name, path, ok := strings.Cut(line, " "); ok {
				images[name] = path
			}
		}
	}
	presetCache[arch] = images
	return images
}

var (
	presetMu    sync.Mutex
	presetCache = map[string]map[string]string{}
)

// vmhome: link the cached preset images of the real ~/.iii/cache into the scenario's fake HOME,
// so the adapter finds them where it looks (without pulling): this host's architecture's in
// ~/.iii/cache, the aarch64 ones of an x86_64 host in ~/.iii/cache/aarch64.
func cmdVMHome(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: vmhome")
	}
	for _, arch := range []string{"x86_64", "aarch64"} {
		cache := filepath.Join(ts.Getenv("HOME"), ".iii", "cache")
		if arch != hostArch() {
			cache = filepath.Join(cache, arch)
		}
		images := presetImages(arch)
		if len(images) == 0 {
			continue
		}
		ts.Check(os.MkdirAll(cache, 0o755))
		for _, img := range images {
			ts.Check(os.Symlink(img, filepath.Join(cache, filepath.Base(img))))
			if _, err := os.Stat(img + ".json"); err == nil {
				ts.Check(os.Symlink(img+".json", filepath.Join(cache, filepath.Base(img)+".json")))
			}
		}
	}
}

// unprivileged PROG [ARG...]: run $BIN/PROG as an unprivileged user (uid and gid 65534) when the
// suite runs as root, as the user itself otherwise. PROG and every argument naming a file are
// copied into a fresh world-readable directory first (the scenario's $WORK is private to
// root), and HOME points at a world-writable one.
func cmdUnprivileged(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: unprivileged PROG [ARG...]")
	}
	dir, err := os.MkdirTemp("", "iii-unprivileged-")
	ts.Check(err)
	ts.Defer(func() { os.RemoveAll(dir) })
	ts.Check(os.Chmod(dir, 0o755))
	home := filepath.Join(dir, "home")
	ts.Check(os.Mkdir(home, 0o777))
	ts.Check(os.Chmod(home, 0o777))
	prog := filepath.Join(dir, args[0])
	b, err := os.ReadFile(filepath.Join(ts.Getenv("BIN"), args[0]))
	ts.Check(err)
	ts.Check(writeProgram(prog, b, 0o755))
	argv := []string{}
	for _, a := range args[1:] {
		if st, err := os.Stat(ts.MkAbs(a)); err == nil && st.Mode().IsRegular() && !strings.HasPrefix(a, "/dev/") {
			cp := filepath.Join(dir, filepath.Base(a))
			ts.Check(copyFile(ts.MkAbs(a), cp, 0o644))
			a = cp
		}
		argv = append(argv, a)
	}
	cmd := exec.Command(prog, argv...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + home}
	for _, k := range unprivilegedEnv {
		if v := ts.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = asNobody()
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	ts.Logf("unprivileged %s (uid %d)", strings.Join(args, " "), map[bool]int{true: 65534, false: os.Geteuid()}[os.Geteuid() == 0])
	fmt.Fprint(ts.Stdout(), stdout.String())
	fmt.Fprint(ts.Stderr(), stderr.String())
	if (err != nil) != neg {
		ts.Fatalf("unprivileged %s: %v (stderr: %s)", args[0], err, stderr.String())
	}
}

// sharedhome VAR: create a directory of mode 0755 outside $WORK (which is private to the user
// who runs the suite), removed when the script ends, and set VAR to it: a home directory
// another user may traverse, as many are, so that what keeps that user out of a file below it
// is the file's own mode and its directory's.
func cmdSharedHome(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sharedhome VAR")
	}
	dir, err := os.MkdirTemp("", "iii-sharedhome-")
	ts.Check(err)
	ts.Defer(func() { os.RemoveAll(dir) })
	ts.Check(os.Chmod(dir, 0o755))
	ts.Setenv(args[0], dir)
}

// unprivilegedEnv are the variables unprivileged passes on from the scenario.
var unprivilegedEnv = []string{"PATH", "III_URL", "III_TOKEN_FILE", "III_QEMU", "III_VIRTIOFSD", "III_KVM_DEVICE", "III_LIBCAPNG", "III_LIB_DIR", "III_SANDBOX_ACCELERATOR"}

// vmpids [-timeout=20s] FILE SUBSTRING: wait until at least one live process has SUBSTRING in
// its command line (e.g. a sandbox's state directory) and write their PIDs to FILE, one per line.
// ! vmpids: wait until there is none.
func cmdVMPids(ts *testscript.TestScript, neg bool, args []string) {
	d, rest := timeoutFlag(ts, "vmpids", args, 20*time.Second)
	if len(rest) != 2 {
		ts.Fatalf("usage: vmpids [-timeout=D] FILE SUBSTRING")
	}
	var pids []string
	ok := enginetest.Poll(d, func() bool {
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

// waitcall [-timeout=30s] [-json BODY] FN PATH VALUE: run `iii call FN --json BODY` (default
// namespace, BODY default {}, the scenario's environment: the user's token lookup included) until
// the reply's PATH reads VALUE (compared as json ==); the last reply is then stdout.
func cmdWaitCall(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("waitcall", flag.ContinueOnError)
	d := fs.Duration("timeout", 30*time.Second, "")
	body := fs.String("json", "{}", "")
	match := fs.String("match", "", "")
	if neg || fs.Parse(args) != nil || !(fs.NArg() == 3 || *match != "" && fs.NArg() == 1) {
		ts.Fatalf("usage: waitcall [-timeout=D] [-json BODY] FN PATH VALUE | waitcall [-timeout=D] [-json BODY] -match REGEXP FN")
	}
	fn, path, want := fs.Arg(0), fs.Arg(1), fs.Arg(2)
	var re *regexp.Regexp
	if *match != "" {
		var err error
		if re, err = regexp.Compile(*match); err != nil {
			ts.Fatalf("waitcall: -match %q: %v", *match, err)
		}
		path, want = "", "matching "+*match
	}
	if ts.Getenv("III_URL") == "" {
		ts.Fatalf("waitcall: III_URL is not set")
	}
	file := ts.MkAbs(".waitcall.json")
	last := ""
	ok := enginetest.Poll(*d, func() bool {
		if err := ts.Exec("iii", "call", fn, "--json", *body, "--timeout-ms", "5000"); err != nil {
			last = strings.TrimSpace(ts.ReadFile("stderr"))
			return false
		}
		// iii call indents its reply and prints nothing for null; keep it compact, as it came.
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(ts.ReadFile("stdout"))); err != nil || compact.Len() == 0 {
			compact.Reset()
			compact.WriteString("null")
		}
		last = compact.String()
		if re != nil {
			return re.MatchString(last)
		}
		ts.Check(os.WriteFile(file, []byte(last), 0o644))
		v, found := readJSONPath(ts, file, path)
		return found && jsonText(v) == want
	})
	if !ok {
		ts.Fatalf("waitcall: %s %s is not %s after %v (last: %s)", fn, path, want, *d, last)
	}
	ts.Stdout().Write([]byte(last))
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}
