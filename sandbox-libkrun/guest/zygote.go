//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
	"golang.org/x/sys/unix"
)

// A zygote is a Python interpreter started ahead of its use (proto.Prestart): it has run its
// whole start-up (under TCG most of a short script's run time) and waits for one request; the
// next exec of a script with that interpreter is run by it instead of by a python3 the agent
// starts, and the zygote is gone. A warm-pool machine starts one after it is restored, so its
// hash secret and everything else its start-up drew from the kernel's generator are its own.
//
// The zygote is the agent's child in a process group of its own, as any exec's process. For the
// request it opens the exec's stdin, stdout and stderr pipes through the agent's /proc/1/fd and
// puts them on 0, 1 and 2 (nothing else is open), takes the exec's working directory,
// environment, sys.argv and sys.orig_argv, sets sys.path[0] and a fresh __main__ module with
// the script's __file__ and loader, and runs the script; an uncaught exception prints the
// traceback python3 prints (its own frame left out) and exits 1, and the interpreter's exit is a
// script's. So the agent waits for it, signals it and times it out as any exec. An exec is run
// by the zygote only when nothing its environment holds would have changed the interpreter's
// start-up (servesExec); any other runs as usual and leaves the zygote waiting. What differs
// from a started interpreter: /proc/<pid>/cmdline shows the zygote's command, the process
// started earlier than the exec, and the stack below the script's module frame holds the
// zygote's frames.
type zygote struct {
	argv0  string
	cmd    *exec.Cmd
	req    *os.File      // the zygote's stdin: one request
	reply  *bufio.Reader // its stdout: "ready", then "ok" for the request
	exited chan struct{} // closed once the zygote has exited and been waited for
}

// zygoteEnv is the environment a zygote starts with: an exec's when it has none.
var zygoteEnv = []string{"PATH=" + defaultPath}

// zygoteSource is the zygote's program (python3 -c). Before it says it is ready it forks one
// rehearsal child, which runs an empty script (/dev/null) the way the zygote will run the exec's
// and exits, so that under TCG the code of running a script and of the interpreter's exit is
// translated before the real one. The request is a 10-digit length, a newline and NUL-separated
// fields: the working directory, the paths of the exec's stdin, stdout and stderr, the argv
// count, the argv, the environment. The zygote answers "ok" once it holds the three pipes, the
// last it says before the script runs.
const zygoteSource = `import os, sys
def _run(f, ok):
    fds = [os.open(f[1 + i], fl) for i, fl in enumerate((os.O_RDONLY, os.O_WRONLY, os.O_WRONLY))]
    os.write(1, ok)
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    na = int(f[4])
    argv, env = f[5:5 + na], f[5 + na:]
    os.chdir(f[0])
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    path = os.path.abspath(argv[1])
    sys.argv, sys.orig_argv = argv[1:], argv
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    import builtins
    m = type(sys)("__main__")
    m.__file__, m.__cached__, m.__builtins__, m.__annotations__ = path, None, builtins, {}
    m.__loader__ = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    sys.modules["__main__"] = m
    with open(path, "rb") as fh:
        src = fh.read()
    try:
        exec(compile(src, path, "exec", dont_inherit=True), m.__dict__)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__.tb_next
        e.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        sys.excepthook(type(e), e, tb)
        raise SystemExit(1) from None
def _zygote():
    pid = os.fork()
    if pid == 0:
        n = os.devnull
        return _run(["/", n, n, n, "2", "python3", n], b"")
    os.waitpid(pid, 0)
    os.write(1, b"ready\n")
    h = os.read(0, 11)
    if len(h) != 11:
        os._exit(0)
    n, b = int(h), b""
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            os._exit(0)
        b += c
    _run([os.fsdecode(x) for x in b.split(b"\0")], b"ok\n")
_zygote()
`

// prestart answers a Prestart frame: it starts the zygote of p.Argv0 and replies once its
// start-up is done. A zygote already waiting is replaced.
func (a *agent) prestart(f proto.Frame) {
	p, ok := decodeFrame[proto.Prestart](a, f)
	if !ok {
		return
	}
	z, err := a.startZygote(p.Argv0)
	if err != nil {
		a.replyErr(f.ID, fmt.Errorf("prestart %s: %w", p.Argv0, err))
		return
	}
	a.mu.Lock()
	old := a.zygote
	a.zygote = z
	a.mu.Unlock()
	if old != nil {
		old.stop()
	}
	a.sendJSON(proto.TypeReply, f.ID, proto.Reply{})
}

func (a *agent) startZygote(argv0 string) (*zygote, error) {
	path, err := lookPath(argv0, defaultPath)
	if err != nil {
		return nil, err
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	z := &zygote{argv0: argv0, req: reqW, reply: bufio.NewReader(repR), exited: make(chan struct{})}
	z.cmd = &exec.Cmd{Path: path, Args: []string{argv0, "-c", zygoteSource}, Env: zygoteEnv, Dir: "/",
		Stdin: reqR, Stdout: repW, Stderr: os.Stderr, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	a.spawnMu.Lock()
	err = z.cmd.Start()
	if err == nil {
		a.children[z.cmd.Process.Pid] = true
	}
	a.spawnMu.Unlock()
	reqR.Close()
	repW.Close()
	if err != nil {
		reqW.Close()
		repR.Close()
		return nil, err
	}
	go func() {
		_ = z.cmd.Wait()
		a.spawnMu.Lock()
		delete(a.children, z.cmd.Process.Pid)
		a.spawnMu.Unlock()
		repR.Close()
		close(z.exited)
		a.mu.Lock()
		if a.zygote == z {
			a.zygote = nil
		}
		a.mu.Unlock()
	}()
	line, err := z.readLine(30 * time.Second)
	if err != nil || line != "ready" {
		z.stop()
		return nil, fmt.Errorf("the interpreter did not start (%q): %w", line, err)
	}
	return z, nil
}

// readLine reads one line the zygote writes, within d.
func (z *zygote) readLine(d time.Duration) (string, error) {
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := z.reply.ReadString('\n')
		ch <- result{strings.TrimSuffix(s, "\n"), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(d):
		return "", errors.New("timed out")
	}
}

// stop kills the zygote unless it has exited (a child it forked is in a process group of its
// own) and waits for it.
func (z *zygote) stop() {
	_ = z.cmd.Process.Kill()
	z.req.Close()
	<-z.exited
}

// takeZygote hands out the waiting zygote if it can serve ex.
func (a *agent) takeZygote(ex proto.Exec) *zygote {
	a.mu.Lock()
	defer a.mu.Unlock()
	z := a.zygote
	if z == nil || !servesExec(z.argv0, ex) {
		return nil
	}
	a.zygote = nil
	return z
}

// servesExec reports whether ex is `argv0 script [args]` of an existing regular file in an
// existing working directory, with an environment that leaves the interpreter's start-up as the
// zygote's was: the same PATH (sys.executable), no HOME (the user site directory), no locale
// (the encoding of stdio) and no PYTHON* variable, each key once, no NUL anywhere.
func servesExec(argv0 string, ex proto.Exec) bool {
	if len(ex.Argv) < 2 || ex.Argv[0] != argv0 || ex.Argv[1] == "" || strings.HasPrefix(ex.Argv[1], "-") {
		return false
	}
	env := withDefaultPath(ex.Env)
	if envGet(env, "PATH") != envGet(zygoteEnv, "PATH") {
		return false
	}
	seen := map[string]bool{}
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || seen[k] || strings.HasPrefix(k, "PYTHON") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "HOME" {
			return false
		}
		seen[k] = true
	}
	for _, s := range append(append([]string{ex.Workdir}, ex.Argv...), env...) {
		if strings.ContainsRune(s, 0) {
			return false
		}
	}
	dir := workdir(ex)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return false
	}
	script := ex.Argv[1]
	if !filepath.IsAbs(script) {
		script = filepath.Join(dir, script)
	}
	st, err := os.Stat(script)
	return err == nil && st.Mode().IsRegular() && unix.Access(script, unix.R_OK) == nil
}

// runPrestarted runs ex in z. ok is false when z could not take it (it had exited, say);
// nothing of ex has run then, and the caller runs it as usual.
func (a *agent) runPrestarted(id uint32, ex proto.Exec, z *zygote) (done proto.ExecDone, ok bool) {
	defer z.stop()
	var theirs, mine [3]*os.File // stdin, stdout, stderr: the zygote's end and the agent's
	defer func() {
		for _, f := range append(theirs[:], mine[:]...) {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i := range theirs {
		r, w, err := os.Pipe()
		if err != nil {
			return done, false
		}
		if i == 0 {
			theirs[i], mine[i] = r, w
		} else {
			theirs[i], mine[i] = w, r
		}
	}
	fields := []string{workdir(ex)}
	for _, f := range theirs {
		fields = append(fields, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()))
	}
	fields = append(fields, strconv.Itoa(len(ex.Argv)))
	fields = append(append(fields, ex.Argv...), withDefaultPath(ex.Env)...)
	body := strings.Join(fields, "\x00")
	r := a.track(id)
	defer a.untrack(id)
	r.mu.Lock()
	r.pgid = z.cmd.Process.Pid
	r.mu.Unlock()
	if _, err := fmt.Fprintf(z.req, "%010d\n%s", len(body), body); err != nil {
		return done, false
	}
	if line, err := z.readLine(10 * time.Second); err != nil || line != "ok" {
		return done, false
	}
	stdout, stderr := a.outputs(id, ex)
	copied := make(chan struct{}, 2)
	go func() {
		_, _ = mine[0].Write(ex.Stdin)
		mine[0].Close()
	}()
	for i, w := range []*capWriter{stdout, stderr} {
		go func() {
			_, _ = io.Copy(w, mine[1+i])
			copied <- struct{}{}
		}()
	}
	timedOut := waitTimeout(func() { <-z.exited }, r, ex.TimeoutMS)
	for _, f := range theirs {
		f.Close()
	}
	// As os/exec's WaitDelay: output a background child still holds open is cut after 500 ms.
	deadline := time.After(500 * time.Millisecond)
	for range 2 {
		select {
		case <-copied:
		case <-deadline:
			mine[1].Close()
			mine[2].Close()
			<-copied
		}
	}
	var ws syscall.WaitStatus
	if z.cmd.ProcessState != nil {
		ws, _ = z.cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	return exitResult(ws, z.cmd.ProcessState != nil, stdout, stderr, timedOut), true
}

// workdir is ex's working directory, / when it names none.
func workdir(ex proto.Exec) string {
	if ex.Workdir == "" {
		return "/"
	}
	return ex.Workdir
}
