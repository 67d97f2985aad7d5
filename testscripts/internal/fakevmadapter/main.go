// Command fakevmadapter is a test-only sandbox adapter for Compose's VM-worker scenarios, where
// the VM itself is not the point. It registers <prefix>::adapter::info, <prefix>::list and
// <prefix>::worker::start|stop|status|delete in $III_NAMESPACE with the adapter's request shapes:
// worker::start refuses a directory outside its host roots with S501 (the roots are fixed at
// start: $III_COMPOSE_DIR, $III_SANDBOX_HOST_ROOTS and Compose's package cache), keeps the VM
// state in ~/.iii/sandbox/workers/<vm_id>/ and runs the worker's command as a host process in
// the worker's directory instead of booting a VM.
//
// Environment: III_SANDBOX_PREFIX (default sandbox-libkrun), FAKEVM_EXIT=1 makes it exit 1 at
// start (a broken adapter), FAKEVM_FAIL_DELETE=1 makes worker::delete fail, FAKEVM_HOLD_STOP=FILE
// makes worker::stop create FILE and answer only when the adapter exits. worker::status reports
// the worker's pid while it runs and, once its command ended on its own (kill -9 of that pid is
// how a scenario kills a VM), state "exited" with its exit_code (128+signal for a signal), as
// the real adapter does.
//
// Built with the tag contract02 it answers worker::start as a 0.2 adapter does in this project's
// model of the guide's "on 0.2, observers can read the project's token" (req B9): it resolves the
// project token into the VM's environment and reports that environment in its result, which
// every observer of worker::start receives. The default build reports no environment, as 0.3 does.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/iii-go/iii/internal/base/iiidir"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/fspath"
	"github.com/iii-go/iii/internal/base/procgroup"
)

type vm struct {
	cmd      *exec.Cmd
	done     chan struct{}
	exitCode int // valid once done is closed: the status, or 128+signal
}

type adapter struct {
	prefix string
	roots  []string
	home   string
	mu     sync.Mutex
	vms    map[string]*vm
}

func main() {
	if os.Getenv("FAKEVM_EXIT") == "1" {
		fmt.Fprintln(os.Stderr, "fakevmadapter: FAKEVM_EXIT=1: exiting at start")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &adapter{prefix: os.Getenv("III_SANDBOX_PREFIX"), vms: map[string]*vm{}}
	if a.prefix == "" {
		a.prefix = "sandbox-libkrun"
	}
	a.home, _ = os.UserHomeDir()
	a.roots = hostRoots(a.home)
	w := protocol.NewWorker(protocol.Config{Version: "0.0.0-fakevm"}.FromEnv(os.Getenv))
	reg := func(op string, h protocol.Handler) { _ = w.Register(a.prefix+"::"+op, h) }
	reg("adapter::info", func(context.Context, json.RawMessage) (any, error) {
		return map[string]any{"adapter": a.prefix, "contract": map[string]int{"major": 1, "minor": 1}, "host_roots": a.roots}, nil
	})
	reg("list", func(context.Context, json.RawMessage) (any, error) { return map[string]any{"sandboxes": []any{}}, nil })
	reg("worker::start", a.start)
	reg("worker::stop", a.stop)
	reg("worker::status", a.status)
	reg("worker::delete", a.delete)
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fakevmadapter:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "fakevmadapter: serving %s::* in %s, host roots: %s\n", a.prefix, w.Namespace(), strings.Join(a.roots, ", "))
	select {
	case <-ctx.Done():
	case <-w.Done():
	}
	a.mu.Lock()
	ids := make([]string, 0, len(a.vms))
	for id := range a.vms {
		ids = append(ids, id)
	}
	a.mu.Unlock()
	for _, id := range ids {
		a.kill(id)
	}
	w.Close()
}

func hostRoots(home string) []string {
	var roots []string
	if d := os.Getenv("III_COMPOSE_DIR"); d != "" {
		roots = append(roots, d)
	}
	for _, r := range filepath.SplitList(os.Getenv("III_SANDBOX_HOST_ROOTS")) {
		if r != "" {
			roots = append(roots, r)
		}
	}
	if s := os.Getenv("III_COMPOSE_STATE_DIR"); s != "" {
		roots = append(roots, filepath.Join(s, "packages"))
	} else {
		roots = append(roots, iiidir.Under(home, iiidir.PackagesDir))
	}
	sort.Strings(roots)
	out := roots[:0]
	for i, r := range roots {
		if i == 0 || r != roots[i-1] {
			out = append(out, r)
		}
	}
	return out
}

func sErr(code, typ, msg string) error {
	raw, _ := json.Marshal(map[string]any{"type": typ, "code": code, "message": msg,
		"docs_url": "https://iii.dev/docs/using-iii/sandboxes#" + strings.ToLower(code), "retryable": false, "fix": nil, "fix_note": msg})
	return protocol.RawError(raw)
}

func (a *adapter) stateDir(id string) string {
	return iiidir.Under(a.home, iiidir.WorkersDir, id)
}

func (a *adapter) start(_ context.Context, raw json.RawMessage) (any, error) {
	var in struct {
		VMID    string            `json:"vm_id"`
		Name    string            `json:"name"`
		Image   string            `json:"image"`
		Dir     string            `json:"dir"`
		Command []string          `json:"command"`
		Env     map[string]string `json:"env"`
		EnvFile string            `json:"env_file"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || in.VMID == "" || len(in.Command) == 0 {
		return nil, sErr(scode.S001, "validation", "invalid request: vm_id, dir and command are required")
	}
	var err error
	if in.Env, err = withEnvFile(in.Env, in.EnvFile); err != nil {
		return nil, err
	}
	if err := a.checkRoot(in.Dir); err != nil {
		return nil, err
	}
	dir := a.stateDir(in.VMID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	meta, _ := json.Marshal(map[string]string{"name": in.Name, "dir": in.Dir, "image": in.Image})
	_ = os.WriteFile(filepath.Join(dir, "vm.json"), meta, 0o600)
	log, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	if reportsEnv {
		if err := resolveToken(in.Env); err != nil {
			return nil, sErr(scode.S200, "execution", err.Error())
		}
	}
	cmd := exec.Command(in.Command[0], in.Command[1:]...)
	cmd.Dir = in.Dir
	cmd.Stdout, cmd.Stderr = log, log
	for k, v := range in.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = procgroup.Attr(true)
	if err := cmd.Start(); err != nil {
		return nil, sErr(scode.S200, "execution", "starting the VM worker: "+err.Error())
	}
	a.mu.Lock()
	a.vms[in.VMID] = watch(cmd)
	a.mu.Unlock()
	res := map[string]any{"vm_id": in.VMID, "name": in.Name, "state": "running", "state_dir": dir, "pids": []int{cmd.Process.Pid}}
	if reportsEnv {
		res["env"] = in.Env
	}
	return res, nil
}

// withEnvFile adds to env the variables of file that env does not set: Compose hands the
// container's own environment in a 0600 file, as to the real adapter.
func withEnvFile(env map[string]string, file string) (map[string]string, error) {
	if file == "" {
		return env, nil
	}
	b, err := os.ReadFile(file)
	var more map[string]string
	if err == nil {
		err = json.Unmarshal(b, &more)
	}
	if err != nil {
		return nil, sErr(scode.S001, "validation", "invalid request: env_file: "+err.Error())
	}
	if env == nil {
		env = map[string]string{}
	}
	for k, v := range more {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	return env, nil
}

// checkRoot refuses a worker directory outside the adapter's host roots, as the real adapter.
func (a *adapter) checkRoot(dir string) error {
	for _, r := range a.roots {
		if fspath.Within(dir, r) {
			return nil
		}
	}
	return sErr(scode.S501, "config", fmt.Sprintf("host path '%s' is outside the adapter's host roots (%s); the adapter reads its roots only when it starts: "+
		"restart it with `iii call compose::restart worker=sandbox-libkrun`, or move the worker under the compose directory", dir, strings.Join(a.roots, ", ")))
}

// watch is the VM of the started cmd: its exit code (128+N for signal N) is set when it ends.
func watch(cmd *exec.Cmd) *vm {
	v := &vm{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		v.exitCode = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			v.exitCode = 128 + int(ws.Signal())
		}
		close(v.done)
	}()
	return v
}

// resolveToken replaces the token file env names with the token itself, as III_TOKEN.
func resolveToken(env map[string]string) error {
	path, ok := env["III_TOKEN_FILE"]
	if !ok {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the project token: %w", err)
	}
	delete(env, "III_TOKEN_FILE")
	env["III_TOKEN"] = strings.TrimSpace(string(b))
	return nil
}

func vmID(raw json.RawMessage) string {
	var in struct {
		VMID string `json:"vm_id"`
	}
	_ = json.Unmarshal(raw, &in)
	return in.VMID
}

func (a *adapter) kill(id string) bool {
	a.mu.Lock()
	v := a.vms[id]
	delete(a.vms, id)
	a.mu.Unlock()
	if v == nil {
		return false
	}
	_ = procgroup.Signal(v.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-v.done:
	case <-time.After(2 * time.Second):
		_ = procgroup.Signal(v.cmd.Process.Pid, syscall.SIGKILL)
		<-v.done
	}
	return true
}

func (a *adapter) stop(ctx context.Context, raw json.RawMessage) (any, error) {
	id := vmID(raw)
	if f := os.Getenv("FAKEVM_HOLD_STOP"); f != "" {
		_ = os.WriteFile(f, nil, 0o644)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return map[string]any{"vm_id": id, "stopped": a.kill(id)}, nil
}

func (a *adapter) status(_ context.Context, raw json.RawMessage) (any, error) {
	id := vmID(raw)
	a.mu.Lock()
	v := a.vms[id]
	a.mu.Unlock()
	_, err := os.Stat(a.stateDir(id))
	reply := map[string]any{"vm_id": id, "state": "stopped", "state_dir": a.stateDir(id), "state_exists": err == nil, "host_roots": a.roots, "pids": []int{}}
	if v != nil {
		select {
		case <-v.done:
			// The worker's command ended on its own (it crashed, or was killed): the VM exited.
			reply["state"], reply["exit_code"] = "exited", v.exitCode
		default:
			reply["state"], reply["pids"] = "running", []int{v.cmd.Process.Pid}
		}
	}
	return reply, nil
}

func (a *adapter) delete(_ context.Context, raw json.RawMessage) (any, error) {
	id := vmID(raw)
	if os.Getenv("FAKEVM_FAIL_DELETE") == "1" {
		return nil, sErr(scode.S102, "transient", "deleting "+a.stateDir(id)+" failed (FAKEVM_FAIL_DELETE)")
	}
	a.kill(id)
	_, err := os.Stat(a.stateDir(id))
	if rerr := os.RemoveAll(a.stateDir(id)); rerr != nil {
		return nil, rerr
	}
	return map[string]any{"vm_id": id, "deleted": err == nil, "state_dir": a.stateDir(id)}, nil
}
