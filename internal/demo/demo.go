// Package demo is the main job of the repository, `go tool mage demo`: it runs the project
// fixtures/demo under `iii compose --up` with the freshly built binaries and prints what a
// microVM printed.
//
// Everything the run writes lives in one temporary directory: the worker registry the adapter is
// published into (with the VM firmware it carries, as a release publishes it), the copy of the
// project (its .iii/ state, logs and token), and a HOME whose ~/.iii/cache is a symlink to the
// real image cache, the only part of the user's ~/.iii the demo uses. Its ~/.iii/lib starts
// empty: the adapter Compose installs puts its firmware there, as on a user's machine. So the
// package cache, the firmware, the adapter's state and the VMs' temporary files never touch the
// real ~/.iii, and no demo process can be mistaken for another: each carries that HOME in its
// environment or that directory in its command line.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/internal/base/iiidir"
	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/base/procgroup"
	"github.com/iii-go/iii/internal/release"
)

// Namespace is the demo project's namespace (fixtures/demo/worker-compose.yaml).
const Namespace = "demo"

// WorkerBinary is the demo worker's program in bin/ (internal/demoworker).
const WorkerBinary = "iii-demo-worker"

// Deadlines of the steps.
const (
	buildTimeout   = 5 * time.Minute  // go build of the demo worker
	startupTimeout = 4 * time.Minute  // engine, adapter install and start, worker registration
	jobTimeout     = 6 * time.Minute  // the worker's sandbox::run
	stopTimeout    = 90 * time.Second // Compose stopping everything after SIGINT
	goneTimeout    = 30 * time.Second // the last demo process disappearing
	callGrace      = 10 * time.Second // an iii call process beyond its own --timeout-ms
)

// Options steer Run.
type Options struct {
	// Root is the repository root: bin/ holds iii, sandbox-libkrun and iii-demo-worker.
	Root string
	// Out receives progress lines and the VM's output.
	Out io.Writer
	// AdapterConfig is the default configuration published with the adapter.
	AdapterConfig map[string]any
	// Firmware is the VM firmware directory the published adapter carries.
	Firmware string
	// Accelerator is the adapter's accelerator setting for the run (kvm, tcg or auto).
	Accelerator string
	// Keep leaves the temporary directory in place after a successful run.
	Keep bool
}

// BuildWorker builds internal/demoworker into bin/iii-demo-worker.
func BuildWorker(ctx context.Context, root string) error {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	out := filepath.Join(root, "bin", WorkerBinary)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./internal/demoworker")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", WorkerBinary, err, stderr.String())
	}
	return nil
}

// Result is what the demo worker reports through demo::result.
type Result struct {
	Status     string `json:"status"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   *int   `json:"exit_code"`
	Success    bool   `json:"success"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error"`
}

// run is one demo run.
type run struct {
	opts    Options
	tmp     string // the run's temporary directory
	home    string // the fake HOME inside it
	project string // the copy of fixtures/demo
	port    int
	env     []string
	iii     string // bin/iii

	compose     *exec.Cmd
	composeDone chan struct{}
	composeErr  error
	// exitReported: an error already says that Compose exited on its own.
	exitReported bool
	// interrupted: the user pressed Ctrl-C (a child died of SIGINT).
	interrupted bool
	out         *prefixWriter
}

// Run publishes the adapter, runs fixtures/demo under `iii compose --up`, waits for the demo
// worker's sandbox::run, prints its output, stops Compose with SIGINT and checks that no
// process of the demo is left. The binaries must already be in bin/. Every child has a deadline.
func Run(ctx context.Context, opts Options) (err error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	r := &run{opts: opts, iii: filepath.Join(opts.Root, "bin", "iii")}
	for _, b := range []string{"iii", "sandbox-libkrun", WorkerBinary} {
		if _, err := os.Stat(filepath.Join(opts.Root, "bin", b)); err != nil {
			return fmt.Errorf("bin/%s is missing: build it first (go tool mage build)", b)
		}
	}
	if r.tmp, err = os.MkdirTemp("", "iii-demo-"); err != nil {
		return err
	}
	defer func() {
		if err != nil && !r.interrupted {
			fmt.Fprintf(opts.Out, "demo: kept %s for a look (Compose and engine logs under project/.iii/compose/%s/)\n", r.tmp, Namespace)
			return
		}
		if !opts.Keep {
			os.RemoveAll(r.tmp)
		}
	}()
	if err := r.prepare(); err != nil {
		return err
	}
	if err := r.startCompose(); err != nil {
		return err
	}
	res, jobErr := r.waitForJob(ctx)
	if jobErr == nil {
		jobErr = r.show(res)
	}
	stopErr := r.stopCompose()
	goneErr := r.checkGone()
	return errors.Join(jobErr, stopErr, goneErr)
}

// step prints a progress line.
func (r *run) step(format string, args ...any) {
	fmt.Fprintf(r.opts.Out, "==> "+format+"\n", args...)
}

// prepare publishes the adapter, copies the project, lays out the fake HOME and builds the
// environment of every child.
func (r *run) prepare() error {
	root := r.opts.Root
	var adapter release.Product
	for _, p := range release.Products {
		if p.Name == "sandbox-libkrun" {
			adapter = p
		}
	}
	version, err := release.ReadVersion(root, adapter)
	if err != nil {
		return err
	}
	reg := filepath.Join(r.tmp, "registry")
	host := platform.Host(os.Getenv).Triple
	target, ok := release.FindTarget(host)
	if !ok {
		return fmt.Errorf("no release target %s", host)
	}
	fw, err := release.FirmwareFiles(r.opts.Firmware)
	if err != nil {
		return err
	}
	archive, err := release.PackageBinary(r.tmp, adapter.Name, version, target, filepath.Join(root, "bin", adapter.Name), fw...)
	if err != nil {
		return fmt.Errorf("packaging the adapter: %w", err)
	}
	if err := registry.Publish(reg, registry.Package{Name: adapter.Name, Version: version, Type: registry.TypeBinary,
		Artifacts: map[string]string{host: filepath.Join(r.tmp, archive.Name)}, Config: r.opts.AdapterConfig}); err != nil {
		return fmt.Errorf("publishing the adapter: %w", err)
	}
	r.step("published bin/sandbox-libkrun %s (%s) with its VM firmware into the local worker registry %s", version, host, reg)

	r.project = filepath.Join(r.tmp, "project")
	if err := copyProject(filepath.Join(root, "fixtures", "demo"), r.project); err != nil {
		return fmt.Errorf("copying fixtures/demo: %w", err)
	}
	r.home = filepath.Join(r.tmp, "home")
	if err := os.MkdirAll(filepath.Join(r.home, ".iii"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink(iiidir.Env{Getenv: os.Getenv}.Cache(), filepath.Join(r.home, ".iii", "cache")); err != nil {
		return err
	}
	tmpdir := filepath.Join(r.tmp, "tmp")
	if err := os.Mkdir(tmpdir, 0o700); err != nil {
		return err
	}
	if r.port, err = freePort(); err != nil {
		return err
	}
	r.step("project fixtures/demo copied to %s; HOME=%s (its ~/.iii/cache links to %s; its ~/.iii/lib starts empty)",
		r.project, r.home, iiidir.Env{Getenv: os.Getenv}.Cache())

	// The user's III_* and XDG_* settings would point the children elsewhere; drop them.
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "III_"), strings.HasPrefix(k, "XDG_"), k == "HOME", k == "TMPDIR", k == "PATH":
			continue
		}
		r.env = append(r.env, kv)
	}
	r.env = append(r.env,
		"HOME="+r.home,
		"TMPDIR="+tmpdir,
		"PATH="+filepath.Join(root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		"III_REGISTRY_URL=file://"+reg,
		"III_DEMO_PORT="+strconv.Itoa(r.port),
		"III_DEMO_ACCELERATOR="+r.opts.Accelerator,
		"III_URL="+r.engineURL(),
	)
	return nil
}

// composeExit is how Compose ended, as a cause: its wait error, or "exit status 0" for a clean
// exit, as exec spells the others.
func (r *run) composeExit() error {
	if r.composeErr == nil {
		return errors.New("exit status 0")
	}
	return r.composeErr
}

func (r *run) engineURL() string { return "ws://127.0.0.1:" + strconv.Itoa(r.port) }

// startCompose starts `iii compose --up` in the project; its output is shown with a prefix.
func (r *run) startCompose() error {
	r.step("iii compose --up in %s (engine %s, namespace %s)", r.project, r.engineURL(), Namespace)
	r.out = &prefixWriter{w: r.opts.Out, prefix: "    compose | "}
	cmd := exec.Command(r.iii, "compose", "--up")
	cmd.Dir, cmd.Env = r.project, r.env
	cmd.Stdout, cmd.Stderr = r.out, r.out
	// Should this process die, Compose gets the Ctrl-C it would get from a terminal. Linux sends
	// a parent-death signal when the *thread* that forked the child exits, so Compose starts
	// from the process-lifetime spawn thread: started from any goroutine's thread, it would get
	// SIGINT, mid-start, whenever that thread ended.
	cmd.SysProcAttr = interruptWithParent()
	if err := procgroup.Start(cmd); err != nil {
		return fmt.Errorf("starting iii compose: %w", err)
	}
	r.compose, r.composeDone = cmd, make(chan struct{})
	go func() {
		r.composeErr = cmd.Wait()
		r.out.Flush()
		close(r.composeDone)
	}()
	return nil
}

// waitForJob waits until Compose reports every container ready, then until the demo worker's
// job is over.
func (r *run) waitForJob(ctx context.Context) (*Result, error) {
	r.step("waiting for Compose to start the engine, the adapter and the demo worker (at most %v)", startupTimeout)
	start := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		ready, err := r.projectReady(ctx)
		if err != nil {
			return nil, err
		}
		if ready {
			break
		}
		select {
		case <-r.composeDone:
			r.exitReported = true
			return nil, fmt.Errorf("iii compose --up exited before the project was ready (%w); its output is above", r.composeExit())
		case <-ctx.Done():
			r.interrupted = !errors.Is(ctx.Err(), context.DeadlineExceeded)
			return nil, ctx.Err()
		case <-tick.C:
		}
		if time.Since(start) > startupTimeout {
			return nil, fmt.Errorf("the project was not ready within %v (see the Compose output above)", startupTimeout)
		}
	}
	r.step("project ready after %v; the demo worker's sandbox::run boots a microVM (at most %v)", time.Since(start).Round(100*time.Millisecond), jobTimeout)
	jobStart := time.Now()
	for {
		var res Result
		wait := 15 * time.Second
		if err := r.call(ctx, wait+10*time.Second, &res, "demo::result", "wait_ms="+strconv.FormatInt(wait.Milliseconds(), 10)); err != nil {
			return nil, err
		}
		if res.Status != "running" {
			return &res, nil
		}
		if time.Since(jobStart) > jobTimeout {
			return nil, fmt.Errorf("the demo worker's sandbox::run still runs after %v", jobTimeout)
		}
		select {
		case <-r.composeDone:
			r.exitReported = true
			return nil, fmt.Errorf("iii compose --up exited while the demo ran (%w)", r.composeExit())
		default:
		}
		r.step("sandbox::run still running (%v)", time.Since(jobStart).Round(time.Second))
	}
}

// projectReady asks compose::status whether every container is ready; a failed one is an error.
// Until the engine and the Compose daemon answer, the project is not ready.
func (r *run) projectReady(ctx context.Context) (bool, error) {
	var st struct {
		Containers []struct {
			Container string `json:"container"`
			State     string `json:"state"`
			LastError string `json:"last_error"`
		} `json:"containers"`
	}
	if err := r.call(ctx, 5*time.Second, &st, "compose::status"); err != nil {
		return false, nil
	}
	ready := len(st.Containers) > 0
	for _, c := range st.Containers {
		if c.State == "failed" {
			return false, fmt.Errorf("container %s failed to start: %s", c.Container, c.LastError)
		}
		ready = ready && c.State == "ready"
	}
	return ready, nil
}

// call runs `bin/iii call FN ARGS... -n demo` with the given call timeout and decodes its result
// into out.
func (r *run) call(ctx context.Context, timeout time.Duration, out any, fn string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout+callGrace)
	defer cancel()
	argv := append([]string{"call", fn}, args...)
	argv = append(argv, "-n", Namespace, "--timeout-ms", strconv.FormatInt(timeout.Milliseconds(), 10))
	cmd := exec.CommandContext(ctx, r.iii, argv...)
	cmd.Env = r.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT {
			r.interrupted = true
			return errors.New("interrupted (Ctrl-C)")
		}
		return fmt.Errorf("iii call %s: %w: %s", fn, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("iii call %s: not the expected reply: %w: %s", fn, err, stdout.String())
	}
	return nil
}

// show prints what the VM printed and checks it came from the firmware's guest kernel.
func (r *run) show(res *Result) error {
	if res.Status != "done" {
		return fmt.Errorf("the demo worker's sandbox::run failed: %s", res.Error)
	}
	code := "?"
	if res.ExitCode != nil {
		code = strconv.Itoa(*res.ExitCode)
	}
	title := fmt.Sprintf(" what the VM printed (sandbox::run, python, exit code %s, %v) ", code,
		(time.Duration(res.DurationMS) * time.Millisecond).Round(10*time.Millisecond))
	w := r.opts.Out
	fmt.Fprintf(w, "\n┌──%s%s\n", title, strings.Repeat("─", max(4, 72-len([]rune(title)))))
	for _, l := range strings.Split(strings.TrimRight(res.Stdout, "\n"), "\n") {
		fmt.Fprintf(w, "│ %s\n", l)
	}
	if strings.TrimSpace(res.Stderr) != "" {
		fmt.Fprintf(w, "├── stderr\n")
		for _, l := range strings.Split(strings.TrimRight(res.Stderr, "\n"), "\n") {
			fmt.Fprintf(w, "│ %s\n", l)
		}
	}
	fmt.Fprintf(w, "└%s\n", strings.Repeat("─", 76))
	if res.ExitCode == nil || *res.ExitCode != 0 {
		return fmt.Errorf("the python snippet exited with code %s", code)
	}
	hostKernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	guest := ""
	for _, l := range strings.Split(res.Stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "guest kernel: "); ok {
			guest = v
		}
	}
	want := r.firmwareKernel()
	if want == "" {
		return fmt.Errorf("the adapter installed no VM firmware into %s", filepath.Join(r.home, ".iii", "lib"))
	}
	if guest != want {
		return fmt.Errorf("the snippet reports kernel %q, the VM firmware's is %q", guest, want)
	}
	fmt.Fprintf(w, "guest kernel %s is the VM firmware's (this host runs %s)\n\n", guest, strings.TrimSpace(string(hostKernel)))
	return nil
}

// firmwareKernel is the kernel release recorded in the manifest of the firmware the adapter
// installed into the demo's HOME, "" when unknown.
func (r *run) firmwareKernel() string {
	b, err := os.ReadFile(filepath.Join(r.home, ".iii", "lib", "iii-vm-firmware.json"))
	if err != nil {
		return ""
	}
	var m struct {
		KernelRelease string `json:"kernel_release"`
	}
	_ = json.Unmarshal(b, &m)
	return m.KernelRelease
}

// stopCompose sends SIGINT to Compose (it stops the workers, the adapter's VMs and the engine)
// and waits for it; past stopTimeout it is killed and that is an error.
func (r *run) stopCompose() error {
	select {
	case <-r.composeDone:
		if r.exitReported || r.interrupted && r.composeErr == nil {
			return nil
		}
		return fmt.Errorf("iii compose --up exited on its own: %w", r.composeExit())
	default:
	}
	r.step("stopping Compose (SIGINT)")
	start := time.Now()
	if err := r.compose.Process.Signal(os.Interrupt); err != nil {
		return fmt.Errorf("signalling iii compose: %w", err)
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-r.composeDone:
	case <-t.C:
		_ = r.compose.Process.Kill()
		<-r.composeDone
		return fmt.Errorf("iii compose did not stop within %v of SIGINT; killed it", stopTimeout)
	}
	if r.composeErr != nil {
		return fmt.Errorf("iii compose exited with %w after SIGINT", r.composeExit())
	}
	r.step("Compose stopped in %v", time.Since(start).Round(10*time.Millisecond))
	return nil
}

// checkGone waits until no process of the demo is left (engine, adapter, worker, qemu,
// virtiofsd); survivors past the deadline are killed and reported.
func (r *run) checkGone() error {
	deadline := time.Now().Add(goneTimeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		left := r.demoProcesses()
		if len(left) == 0 {
			r.step("no process of the demo is left (engine, adapter, demo worker, qemu, virtiofsd)")
			return nil
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, p := range left {
				if proc, err := os.FindProcess(p.pid); err == nil {
					_ = proc.Kill()
				}
				lines = append(lines, fmt.Sprintf("  pid %d: %s", p.pid, p.cmdline))
			}
			return fmt.Errorf("%d process(es) of the demo outlived Compose by %v (now killed):\n%s", len(left), goneTimeout, strings.Join(lines, "\n"))
		}
		<-tick.C
	}
}

type proc struct {
	pid     int
	cmdline string
}

// demoProcesses lists live processes with the demo's HOME in their environment or its
// directory in their command line.
func (r *run) demoProcesses() []proc {
	entries, _ := os.ReadDir("/proc")
	homeVar := "HOME=" + r.home
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue
			}
		}
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		cl := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		environ, _ := os.ReadFile(filepath.Join(dir, "environ"))
		if strings.Contains(cl, r.tmp) || slices.Contains(strings.Split(string(environ), "\x00"), homeVar) {
			out = append(out, proc{pid: pid, cmdline: cl})
		}
	}
	return out
}

// copyProject copies the fixture directory src into dst, leaving out state a hand-run may have
// left behind (.iii/, the lock).
func copyProject(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.Name() == ".iii" || d.Name() == "worker-compose.lock" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
}

// freePort returns a TCP port on 127.0.0.1 that is free right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// prefixWriter writes complete lines to w, each behind prefix.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

// Flush writes a trailing partial line.
func (p *prefixWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf)
		p.buf = nil
	}
}
