//go:build linux

package qemu

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/image/debimage"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// zygoteProbe prints what a script can see of how its interpreter started it; on stderr it says
// whether it runs in a forked zygote (whose command line is the zygote's).
const zygoteProbe = `import json, os, sys
print(json.dumps({
    "argv": sys.argv, "orig_argv": sys.orig_argv, "path": sys.path, "file": __file__,
    "name": __name__, "loader": [type(__loader__).__name__, __loader__.name, __loader__.path],
    "spec": repr(__spec__), "package": __package__, "cached": __cached__, "doc": __doc__,
    "builtins": type(__builtins__).__name__, "globals": sorted(globals()),
    "main": sys.modules["__main__"].__dict__ is globals(), "executable": sys.executable,
    "flags": repr(sys.flags), "cwd": os.getcwd(), "ppid": os.getppid(),
    "leader": os.getpgid(0) == os.getpid(), "session": os.getsid(0), "env": dict(os.environ),
    "stdin": sys.stdin.read(), "buffering": [sys.stdout.line_buffering, sys.stderr.line_buffering],
    "encodings": [sys.stdin.encoding, sys.stdout.encoding, sys.stderr.encoding, sys.getfilesystemencoding()],
    "fds": sorted(os.listdir("/proc/self/fd")), "modules": sorted(sys.modules),
    "signals": [str(__import__("signal").getsignal(s)) for s in (2, 13, 15)],
}, sort_keys=True))
print("forked" if b"_zygote" in open("/proc/self/cmdline", "rb").read() else "started", file=sys.stderr)
`

// TestZygote runs scripts in interpreters the agent prestarted and compares what each sees and
// prints with the same script run by a python3 the agent starts.
func TestZygote(t *testing.T) {
	d := newDriver(t)
	ref := debimage.Presets[0].Ref
	root, ok := image.NewCache(image.DefaultDir(os.Getenv)).RootFS(ref)
	if !ok {
		cannotRun(t, fmt.Sprintf("image %s not in the cache; build it with `go tool mage images`", ref))
	}
	m := boot(t, d, vm.Spec{RootFS: root, MemoryMB: 512})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	files := map[string]string{
		"/tmp/probe.py":  zygoteProbe,
		"/tmp/raise.py":  "import atexit\natexit.register(lambda: print('atexit ran'))\ndef f():\n    raise ValueError('no')\nf()\n",
		"/tmp/syntax.py": "print(\n",
		"/tmp/exit.py":   "import sys\nprint('out', flush=False)\nsys.exit(3)\n",
		"/tmp/hash.py":   "print(hash('iii'))\nimport random\nprint(random.getrandbits(64))\n",
		"/tmp/spin.py":   "while True:\n    pass\n",
	}
	for path, body := range files {
		res := run(t, m, vm.ExecRequest{Argv: []string{"sh", "-c", "cat > " + path}, Stdin: []byte(body)})
		if code(res) != 0 {
			t.Fatalf("writing %s: %s", path, res.Stderr)
		}
	}
	prestart := func() {
		t.Helper()
		start := time.Now()
		if err := m.(vm.Prestarter).Prestart(ctx, "python3"); err != nil {
			t.Fatal(err)
		}
		t.Logf("prestart took %s", time.Since(start).Round(time.Millisecond))
	}
	exec := func(req vm.ExecRequest) (vm.ExecResult, time.Duration) {
		t.Helper()
		start := time.Now()
		res := run(t, m, req)
		return res, time.Since(start)
	}
	// Each case runs forked from a prestarted interpreter, then started as usual.
	cases := []vm.ExecRequest{
		{Argv: []string{"python3", "/tmp/probe.py", "a b", "c"}, Env: []string{"X=1", "EMPTY="}, Workdir: "/root", Stdin: []byte("input\n")},
		{Argv: []string{"python3", "probe.py"}, Workdir: "/tmp"},
		{Argv: []string{"python3", "/tmp/raise.py"}},
		{Argv: []string{"python3", "/tmp/syntax.py"}},
		{Argv: []string{"python3", "/tmp/exit.py"}},
	}
	for _, c := range cases {
		prestart()
		forked, df := exec(c)
		started, ds := exec(c)
		t.Logf("%q: forked %s, started %s", c.Argv, df.Round(time.Millisecond), ds.Round(time.Millisecond))
		if c.Argv[1] == "probe.py" || c.Argv[1] == "/tmp/probe.py" {
			if !strings.Contains(string(forked.Stderr), "forked") || !strings.Contains(string(started.Stderr), "started") {
				t.Fatalf("%q: stderr %q forked, %q started: the prestarted interpreter was not used, or was used twice", c.Argv, forked.Stderr, started.Stderr)
			}
			forked.Stderr, started.Stderr = nil, nil
		}
		forked.Duration, started.Duration = 0, 0
		if diff := cmp.Diff(started, forked); diff != "" {
			t.Errorf("%q: forked differs from started (-started +forked):\n%s", c.Argv, diff)
		}
	}

	// A locale, HOME or PYTHON* variable changes the start-up: that exec starts its own, and the
	// prestarted interpreter still waits for the next one.
	prestart()
	for _, env := range []string{"LANG=C.UTF-8", "HOME=/tmp", "PYTHONPATH=/tmp", "LC_ALL=C"} {
		res, _ := exec(vm.ExecRequest{Argv: []string{"python3", "/tmp/probe.py"}, Env: []string{env}})
		if !strings.Contains(string(res.Stderr), "started") {
			t.Fatalf("%s: %q, want a started interpreter", env, res.Stderr)
		}
	}
	res, _ := exec(vm.ExecRequest{Argv: []string{"python3", "/tmp/probe.py"}})
	if !strings.Contains(string(res.Stderr), "forked") {
		t.Fatalf("after execs it could not serve: %q, want the prestarted interpreter", res.Stderr)
	}

	// Each prestarted interpreter has its own hash secret and random state.
	var outs []string
	for range 2 {
		prestart()
		res, _ := exec(vm.ExecRequest{Argv: []string{"python3", "/tmp/hash.py"}})
		outs = append(outs, string(res.Stdout))
	}
	res, _ = exec(vm.ExecRequest{Argv: []string{"python3", "/tmp/hash.py"}})
	outs = append(outs, string(res.Stdout))
	for i := range outs {
		for j := range i {
			for k, line := range strings.Fields(outs[i]) {
				if line == strings.Fields(outs[j])[k] {
					t.Fatalf("runs %d and %d print the same line %d (%s): %q", j, i, k, line, outs)
				}
			}
		}
	}

	// A timeout kills the forked script's process group as any exec's.
	prestart()
	res, _ = exec(vm.ExecRequest{Argv: []string{"python3", "/tmp/spin.py"}, Timeout: 2 * time.Second})
	if !res.TimedOut || res.Signal != 9 {
		t.Fatalf("spin: timed out %v, signal %d, exit %v", res.TimedOut, res.Signal, res.ExitCode)
	}
}
