// Package serve runs `iii compose`: the daemon (the `compose` worker) and, with --up, the
// file's managed engine and the project's containers, until Ctrl-C, SIGTERM or compose::stop.
//
// Everything Compose starts is tied to its lifetime: the managed engine and the workers run in
// their own process groups with SIGKILL on parent death, and a reaper child kills those groups
// when Compose is gone, SIGKILL of Compose included. A clean shutdown lets a compose::*
// operation in flight finish, stops the workers (polite stop, then kill after stop_timeout),
// then the engine, and removes engine-config.yaml. While it serves, the user's record of the
// project token for `iii call` (package usertoken) exists.
package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/daemon"
	"github.com/iii-go/iii/compose/engineconf"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/project"
	"github.com/iii-go/iii/compose/state"
	"github.com/iii-go/iii/compose/supervisor"
	"github.com/iii-go/iii/compose/token"
	engineerr "github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/usertoken"
)

// EngineStartupTimeout bounds how long the managed engine may take to listen.
const EngineStartupTimeout = 30 * time.Second

// SettleTimeout bounds how long shutdown waits for a compose::* operation in flight to finish.
const SettleTimeout = 20 * time.Second

// Options are the command line of `iii compose` after its checks.
type Options struct {
	Version string
	// File is the compose file; Up starts its engine and containers.
	File string
	Up   bool
	// EngineURL is --engine; Namespace is --namespace.
	EngineURL string
	Namespace string
	// Deps are the compose-file and package operations (part 1's packages).
	Deps daemon.Deps
	// PackageCache is the package cache directory (an adapter host root).
	PackageCache string
	// Out receives progress; Err receives warnings.
	Out, Err io.Writer
	// Exe is the iii binary that runs the engine and the reaper (default os.Executable()).
	Exe string
}

// Run runs Compose until it is told to stop. It returns nil after a clean shutdown.
func Run(ctx context.Context, o Options) error {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Err == nil {
		o.Err = os.Stderr
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return errcode.New(errcode.SpawnFailed, "cannot find the iii binary: %v", err)
		}
		o.Exe = exe
	}
	if o.Deps.Install == nil {
		// Without a package installer only path:// containers can start; package:// ones fail
		// PACKAGE_NOT_INSTALLED when they are reached.
		o.Deps.Install = func(context.Context, *composefile.File, []string) (map[string]project.Package, error) {
			return map[string]project.Package{}, nil
		}
	}
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()

	f, err := o.Deps.Load(o.File)
	if err != nil {
		return err
	}
	if o.Namespace != "" {
		f.Namespace = o.Namespace
	}
	if f.Engine != nil && o.EngineURL != "" {
		return errcode.New(errcode.EngineURLConflictsWithManaged, "%s declares engine: (Compose starts that engine); drop --engine %s, or remove the engine: section to attach", f.Path, o.EngineURL)
	}
	sd, err := state.Resolve(f.Path, f.Namespace)
	if err != nil {
		return errcode.New(errcode.StateDirUnavailable, "%v", err)
	}
	if err := sd.Ensure(); err != nil {
		return errcode.New(errcode.StateDirUnavailable, "cannot create %s: %v", sd.Path, err)
	}
	tokPath, _, err := token.Ensure(sd.Path)
	if err != nil {
		return errcode.New(errcode.IOError, "project token in %s: %v", sd.Path, err)
	}
	// Compose's own connection holds the owner token; workers never do. The engine Compose starts
	// gets a fresh one each run; an engine the user runs names a lasting one in its config.
	managed := f.Engine != nil && o.Up
	var ownerPath string
	if managed {
		ownerPath, err = token.NewOwner(sd.Path)
	} else {
		ownerPath, err = token.EnsureOwner(sd.Path)
	}
	if err != nil {
		return errcode.New(errcode.IOError, "owner token in %s: %v", sd.Path, err)
	}
	daemonTok := ownerPath
	fmt.Fprintf(o.Out, "pid: %d\nowner: %s\nconfig: %s\nlogs: %s\n", os.Getpid(), f.Path, sd.Path, sd.Join(state.LogsDir))

	var pkgs map[string]project.Package
	if o.Up {
		if pkgs, err = o.Deps.Install(ctx, f, nil); err != nil {
			return err
		}
		if ak := project.AdapterKey(f); ak != "" {
			msg, err := token.RotateIfExposed(sd.Path, f.Containers[ak].Source.Name, pkgs[ak].Version)
			if err != nil {
				return errcode.New(errcode.IOError, "replacing the project token: %v", err)
			}
			if msg != "" {
				fmt.Fprintln(o.Out, msg)
			}
		}
	}

	reaper, err := supervisor.StartReaper(o.Exe, "compose")
	if err != nil {
		return errcode.New(errcode.SpawnFailed, "%v", err)
	}
	defer reaper.Close()
	sup := supervisor.New(reaper)

	rec, err := sd.Load()
	if err != nil {
		return errcode.New(errcode.InvalidStateFile, "%v", err)
	}
	// Children of an earlier run are gone (they died with it); the VM records stay.
	rec.DaemonPID, rec.Engine, rec.Children = os.Getpid(), nil, map[string]state.Child{}
	url := o.EngineURL
	if url == "" {
		url = os.Getenv(protocol.EnvURL)
	}
	if url == "" {
		url = protocol.DefaultURL
	}
	var engineDone <-chan struct{}
	if managed {
		url = f.Engine.URL
		proc, err := startEngine(ctx, o, f, sd, tokPath, ownerPath, sup)
		if err != nil {
			return err
		}
		engineDone = proc.Done()
		rec.Engine = &state.Child{Container: "engine", PID: proc.PID, Status: "ready", StartedAt: proc.Started}
		defer stopEngine(o, sd, sup, f)
		fmt.Fprintf(o.Out, " ✔ Engine %-23s Ready\n", url)
	}
	_ = sd.Save(rec)

	w := protocol.NewWorker(protocol.Config{URL: url, Namespace: f.Namespace, Name: "compose", Version: o.Version,
		Description: "iii compose daemon", TokenFile: daemonTok})
	p := project.New(project.Options{File: f, State: sd, EngineURL: url, TokenFile: tokPath, OwnerTokenFile: ownerPath, Managed: managed,
		Engine: w, Sup: sup, Packages: pkgs, PackageCache: o.PackageCache, Out: o.Out})
	d := daemon.New(f.Namespace, p, o.Deps)
	if err := d.Register(w); err != nil {
		return err
	}
	release := d.HoldMutations()
	defer release()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	err = w.Start(cctx)
	ccancel()
	if err != nil {
		var pe *protocol.Error
		if !managed && errors.As(err, &pe) && pe.Code == engineerr.TokenInvalid {
			return errcode.New(errcode.EngineCallFailed, "connecting the compose daemon to %s: %v. Compose presents its owner token %s on an engine it attaches to; "+
				"where that engine protects namespace '%s', its config.yaml must name that file too:\n%sthen restart the engine",
				url, err, ownerPath, f.Namespace, engineconf.OwnerGrant(f.Namespace, tokPath, ownerPath))
		}
		return errcode.New(errcode.EngineCallFailed, "connecting the compose daemon to %s: %v", url, err)
	}
	defer w.Close()
	if err := checkServing(ctx, w, f.Namespace); err != nil {
		return err
	}
	// The user's `iii call compose::*`, from any directory, finds a token through this user-only
	// record (removed when Compose stops; a killed Compose's is swept later): the project token
	// on an engine Compose starts, whose config lets it call what the owner token registered;
	// on an engine the user runs, which may accept nothing but the token that registered
	// compose::*, the daemon's own (owner) token.
	userTok := tokPath
	if !managed {
		userTok = daemonTok
	}
	if _, remove, err := usertoken.Publish(url, f.Namespace, userTok); err != nil {
		fmt.Fprintf(o.Err, "warning: cannot record the project token for iii call in ~/%s: %v; "+
			"run iii call compose::* with III_TOKEN_FILE=%s\n", usertoken.Dir, err, userTok)
	} else {
		defer func() { _ = remove() }()
	}
	fmt.Fprintf(o.Out, "compose serving\n  engine: %s\n  namespace: %s\n", url, f.Namespace)

	if o.Up {
		if _, err := d.StartProject(ctx); err != nil {
			fmt.Fprintln(o.Out, " ✘ Containers Failed")
			return err
		}
		fmt.Fprintln(o.Out, " ✔ Containers Ready")
	}
	release()
	defer func() {
		d.Settle(SettleTimeout)
		p.StopAll(context.Background())
	}()

	select {
	case <-ctx.Done():
		fmt.Fprintln(o.Out, "stopping...")
		return nil
	case <-d.Stopped:
		fmt.Fprintln(o.Out, "stopping (compose::stop)...")
		return nil
	case <-engineDone:
		return errcode.New(errcode.EngineExited, "the managed engine exited; the end of %s:\n%s", sd.Join(state.EngineLogFile), tailFile(sd.Join(state.EngineLogFile), 10))
	case <-w.Done():
		return errcode.New(errcode.EngineCallFailed, "the daemon lost the engine: %v", w.Err())
	}
}

// startEngine writes engine-config.yaml and starts `iii --config` as a child, then waits until
// it listens.
func startEngine(ctx context.Context, o Options, f *composefile.File, sd state.Dir, tokPath, ownerPath string, sup *supervisor.Supervisor) (*supervisor.Process, error) {
	host, port, err := engineconf.HostPort(f.Engine.URL)
	if err != nil {
		return nil, errcode.New(errcode.InvalidManagedEngineURL, "%s: %v", f.Path, err)
	}
	addr := net.JoinHostPort(host, fmt.Sprint(port))
	if c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
		c.Close()
		return nil, errcode.New(errcode.ManagedEngineListenerUnavailable, "%s is already taken by another process; stop it or change engine.url in %s", addr, f.Path)
	}
	in := engineconf.Input{URL: f.Engine.URL, GraceMS: f.Engine.RegistrationNamespaceGraceMS, Workers: f.Engine.Workers,
		WorkerOrder: f.Engine.WorkerOrder, Namespace: f.Namespace, TokenFile: tokPath, OwnerTokenFile: ownerPath, SandboxAdapter: project.AdapterPrefix(f)}
	if f.Engine.Sandbox != nil {
		in.SandboxNamespace = f.Engine.Sandbox.NamespaceFor(f.Namespace)
	}
	data, err := engineconf.Render(in)
	if err != nil {
		return nil, errcode.New(errcode.InvalidManagedEngineURL, "%s: %v", f.Path, err)
	}
	cfg, err := sd.WriteEngineConfig(data)
	if err != nil {
		return nil, errcode.New(errcode.IOError, "writing %s: %v", cfg, err)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "III_") || strings.HasPrefix(kv, "III_COMPOSE_STATE_DIR=") {
			env = append(env, kv)
		}
	}
	proc, err := sup.Start(supervisor.Spec{Name: "engine", Argv: []string{o.Exe, "--config", cfg}, Dir: f.Dir, Env: env, LogPath: sd.Join(state.EngineLogFile)})
	if err != nil {
		return nil, errcode.New(errcode.EngineSpawnFailed, "starting %s --config %s: %v", o.Exe, cfg, err)
	}
	deadline := time.Now().Add(EngineStartupTimeout)
	for {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return proc, nil
		}
		select {
		case <-proc.Done():
			return nil, errcode.New(errcode.EngineExited, "the managed engine exited before it listened on %s; the end of %s:\n%s", addr, sd.Join(state.EngineLogFile), tailFile(sd.Join(state.EngineLogFile), 10))
		case <-ctx.Done():
			_, _ = sup.Stop("engine", time.Second)
			return nil, errcode.New(errcode.OperationCancelled, "interrupted while the engine started")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_, _ = sup.Stop("engine", time.Second)
			return nil, errcode.New(errcode.EngineStartupTimeout, "the managed engine did not listen on %s within %v; see %s", addr, EngineStartupTimeout, sd.Join(state.EngineLogFile))
		}
	}
}

// stopEngine stops the managed engine and removes its config after a clean stop.
func stopEngine(o Options, sd state.Dir, sup *supervisor.Supervisor, f *composefile.File) {
	fmt.Fprintln(o.Out, "stopping engine...")
	if _, err := sup.Stop("engine", f.StopTimeout); err != nil {
		fmt.Fprintf(o.Err, "warning: %v\n", err)
		return
	}
	if err := sd.RemoveEngineConfig(); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(o.Err, "warning: %v\n", err)
	}
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return supervisor.PlainText(strings.Join(lines, "\n"))
}

// checkServing fails DAEMON_ALREADY_SERVING when compose::up in ns belongs to another worker: the
// engine refused this daemon's functions because another daemon serves the namespace.
func checkServing(ctx context.Context, w *protocol.Worker, ns string) error {
	raw, err := w.Call(ctx, protocol.FnListFunctions, map[string]string{"namespace": ns})
	if err != nil {
		return errcode.New(errcode.EngineCallFailed, "engine::functions::list: %v", err)
	}
	var out struct {
		Functions []struct {
			FunctionID string `json:"function_id"`
			Namespace  string `json:"namespace"`
			WorkerID   string `json:"worker_id"`
			WorkerName string `json:"worker_name"`
		} `json:"functions"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return errcode.New(errcode.EngineCallFailed, "engine::functions::list: %v", err)
	}
	for _, fn := range out.Functions {
		if fn.FunctionID == daemon.FnUp && fn.Namespace == ns && fn.WorkerID != w.WorkerID() {
			return errcode.New(errcode.DaemonAlreadyServing, "another Compose daemon (worker %s) already serves namespace '%s' on this engine; stop it (iii call compose::stop -n %s) or use another --namespace", fn.WorkerID, ns, ns)
		}
	}
	return nil
}
