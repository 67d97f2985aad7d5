//go:build linux

package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
	"golang.org/x/sys/unix"
)

// defaultCap is the per-stream output cap when the host sends none.
const defaultCap = 1 << 20

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// running is an exec in flight.
type running struct {
	mu   sync.Mutex
	pgid int
}

func (a *agent) signal(id uint32, sig unix.Signal) {
	a.mu.Lock()
	r := a.execs[id]
	a.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.pgid > 0 {
		_ = unix.Kill(-r.pgid, sig)
	}
	r.mu.Unlock()
}

func (a *agent) killAll() {
	a.mu.Lock()
	ids := make([]uint32, 0, len(a.execs))
	for id := range a.execs {
		ids = append(ids, id)
	}
	a.mu.Unlock()
	for _, id := range ids {
		a.signal(id, unix.SIGKILL)
	}
}

// capWriter keeps the first max bytes and records whether more arrived; when stream is set it
// also forwards each chunk as an Output frame.
type capWriter struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	max       int
	truncated bool
	forward   func([]byte)
}

// Write keeps what fits under the cap and always reports the whole of p as written.
func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := p
	if room := w.max - w.buf.Len(); len(keep) > room {
		keep = keep[:max(room, 0)]
		w.truncated = true
	}
	w.buf.Write(keep)
	if w.forward != nil && len(keep) > 0 {
		w.forward(bytes.Clone(keep))
	}
	return len(p), nil
}

func (a *agent) exec(id uint32, ex proto.Exec) {
	start := time.Now()
	done := a.run(id, ex)
	done.DurationNS = time.Since(start).Nanoseconds()
	a.sendJSON(proto.TypeExecDone, id, done)
}

func (a *agent) run(id uint32, ex proto.Exec) proto.ExecDone {
	if len(ex.Argv) == 0 || ex.Argv[0] == "" {
		return proto.ExecDone{Stderr: []byte("empty argv\n"), ExitCode: intp(127)}
	}
	if z := a.takeZygote(ex); z != nil {
		if done, ok := a.runPrestarted(id, ex, z); ok {
			return done
		}
	}
	cmd, stdout, stderr, err := a.command(id, ex)
	if err != nil {
		return spawnFailure(ex.Argv[0], err)
	}
	r := a.track(id)
	defer a.untrack(id)
	if err := a.startChild(cmd, r); err != nil {
		return spawnFailure(ex.Argv[0], err)
	}
	defer a.forgetChild(r)
	timedOut := waitTimeout(func() { _ = cmd.Wait() }, r, ex.TimeoutMS)
	var ws syscall.WaitStatus
	if cmd.ProcessState != nil {
		ws, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	return exitResult(ws, cmd.ProcessState != nil, stdout, stderr, timedOut)
}

// withDefaultPath is env with the default PATH added when it has none.
func withDefaultPath(env []string) []string {
	if envGet(env, "PATH") == "" {
		return append(env[:len(env):len(env)], "PATH="+defaultPath)
	}
	return env
}

// outputs are the two capped writers of ex's stdout and stderr, which also stream when asked.
func (a *agent) outputs(id uint32, ex proto.Exec) (stdout, stderr *capWriter) {
	capN := ex.OutputCap
	if capN <= 0 {
		capN = defaultCap
	}
	stdout = &capWriter{max: capN}
	stderr = &capWriter{max: capN}
	if ex.Stream {
		stdout.forward = func(b []byte) { a.sendJSON(proto.TypeOutput, id, proto.Output{Stream: 1, Data: b}) }
		stderr.forward = func(b []byte) { a.sendJSON(proto.TypeOutput, id, proto.Output{Stream: 2, Data: b}) }
	}
	return stdout, stderr
}

// command builds the process for ex, resolving argv[0] against the command's PATH (the default
// one when it has none); its output goes to the writers of outputs.
func (a *agent) command(id uint32, ex proto.Exec) (cmd *exec.Cmd, stdout, stderr *capWriter, err error) {
	env := withDefaultPath(ex.Env)
	path, err := lookPath(ex.Argv[0], envGet(env, "PATH"))
	if err != nil {
		return nil, nil, nil, err
	}
	stdout, stderr = a.outputs(id, ex)
	cmd = &exec.Cmd{
		Path:        path,
		Args:        ex.Argv,
		Env:         env,
		Dir:         workdir(ex),
		Stdin:       bytes.NewReader(ex.Stdin),
		Stdout:      stdout,
		Stderr:      stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		WaitDelay:   500 * time.Millisecond,
	}
	return cmd, stdout, stderr, nil
}

// track records exec id as in flight, so that Kill frames can signal it.
func (a *agent) track(id uint32) *running {
	r := &running{}
	a.mu.Lock()
	a.execs[id] = r
	a.mu.Unlock()
	return r
}

// untrack forgets exec id.
func (a *agent) untrack(id uint32) {
	a.mu.Lock()
	delete(a.execs, id)
	a.mu.Unlock()
}

// startChild starts cmd in its own process group and records it as a child the orphan reaper
// leaves alone; a signal sent meanwhile waits for the process group to be known.
func (a *agent) startChild(cmd *exec.Cmd, r *running) error {
	r.mu.Lock()
	a.spawnMu.Lock()
	err := cmd.Start()
	if err == nil {
		r.pgid = cmd.Process.Pid
		a.children[r.pgid] = true
	}
	a.spawnMu.Unlock()
	r.mu.Unlock()
	return err
}

// forgetChild hands r's process back to the orphan reaper.
func (a *agent) forgetChild(r *running) {
	a.spawnMu.Lock()
	delete(a.children, r.pgid)
	a.spawnMu.Unlock()
}

// waitTimeout runs wait (which returns once the command has exited), killing the command's
// process group after timeoutMS (none when 0), and reports whether it timed out.
func waitTimeout(wait func(), r *running, timeoutMS int64) bool {
	timedOut := false
	var timer *time.Timer
	if timeoutMS > 0 {
		timer = time.AfterFunc(time.Duration(timeoutMS)*time.Millisecond, func() {
			r.mu.Lock()
			timedOut = true
			_ = unix.Kill(-r.pgid, unix.SIGKILL)
			r.mu.Unlock()
		})
	}
	wait()
	if timer != nil {
		timer.Stop()
	}
	// Background children (`nohup server &`) outlive the command unless it timed out.
	r.mu.Lock()
	to := timedOut
	r.mu.Unlock()
	return to
}

// exitResult is the ExecDone of a finished command: its captured output and, when its status
// is known (ok), its exit code or signal.
func exitResult(ws syscall.WaitStatus, ok bool, stdout, stderr *capWriter, timedOut bool) proto.ExecDone {
	res := proto.ExecDone{
		Stdout: stdout.buf.Bytes(), StdoutTruncated: stdout.truncated,
		Stderr: stderr.buf.Bytes(), StderrTruncated: stderr.truncated,
		TimedOut: timedOut,
	}
	switch {
	case !ok:
		res.Stderr = append(res.Stderr, "guest agent: lost the command's exit status\n"...)
	case ws.Signaled():
		res.Signal = int(ws.Signal())
	default:
		res.ExitCode = intp(ws.ExitStatus())
	}
	return res
}

// spawnFailure turns a failed start into the shell's convention: 127 not found, 126 not runnable.
func spawnFailure(name string, err error) proto.ExecDone {
	code := 126
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, exec.ErrNotFound) {
		code = 127
	}
	return proto.ExecDone{Stderr: []byte(name + ": " + err.Error() + "\n"), ExitCode: intp(code)}
}

func envGet(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// lookPath resolves name like a shell does, against the command's PATH rather than the agent's.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, checkExec(name)
	}
	var firstErr error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		err := checkExec(p)
		if err == nil {
			return p, nil
		}
		if firstErr == nil && !errors.Is(err, fs.ErrNotExist) {
			firstErr = err
		}
	}
	if firstErr != nil {
		return "", firstErr
	}
	return "", exec.ErrNotFound
}

func checkExec(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}
