// Package serve runs `iii compose`: the daemon (the `compose` worker) and, with --up, the
// file's managed engine and the project's containers, until Ctrl-C, SIGTERM or compose::stop.
//
// Everything Compose starts is tied to its lifetime: the managed engine and the workers run in
// their own process groups with SIGKILL on parent death, and a reaper child kills those groups
// when Compose is gone, SIGKILL of Compose included. A clean shutdown lets a compose::*
// operation in flight finish, stops the workers (polite stop, then kill after stop_timeout),
// then the engine, and removes engine-config.yaml. While it serves, the user's record of the
// project token for `iii call` (package tokens) exists.
package serve

import (
	"cmp"
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
	"github.com/iii-go/iii/engine/protocol"
	engineerr "github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/tokens"
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
	// EngineURL is --engine; Namespace is --namespace: the daemon's namespace (compose::*, the
	// state directory's key), not the project's, which is the file's namespace: (else default).
	EngineURL string
	// LookupEnv is the environment: $III_URL (the engine attached to without --engine),
	// $III_COMPOSE_STATE_DIR, the compose variables of packages project and supervisor and what
	// workers inherit. nil is an empty one.
	LookupEnv func(string) (string, bool)
	// Environ is the same environment whole, KEY=VALUE (os.Environ() in the binary): the reaper
	// inherits it, and the managed engine without its III_* variables. nil is an empty one.
	Environ   []string
	Namespace string
	// Deps are the compose-file and package operations the daemon delegates (daemon.Deps).
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
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	// A signal ends Compose's ctx with the signal as its cause (context.Cause), which an
	// interrupted start names.
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	s := &session{o: o}
	defer s.teardown()
	for _, phase := range []func(context.Context) error{
		s.loadFile, s.prepareState, s.installPackages, s.startSupervisor,
		s.startManagedEngine, s.publishUserToken, s.connectDaemon, s.startProject,
	} {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	return s.wait(ctx)
}

// withDefaults fills the options Run may be given empty.
func (o Options) withDefaults() (Options, error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Err == nil {
		o.Err = os.Stderr
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, errcode.New(errcode.SpawnFailed, "cannot find the iii binary: %w", err)
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
	return o, nil
}

// session is one run of Compose. Each phase of Run fills in what the next needs and registers
// the teardown of what it started; teardown runs them in reverse.
type session struct {
	o Options
	f *composefile.File
	// ns is the daemon's namespace: where compose::* is served, the key of the state directory
	// and of the user's token record (--namespace, else the project's, f.Namespace).
	ns      string
	sd      state.Dir
	managed bool // Compose starts the file's engine (engine: mapping and --up)
	// tokPath is the project token (workers); ownerPath the owner token (Compose's own connection).
	tokPath, ownerPath string
	pkgs               map[string]project.Package
	sup                *supervisor.Supervisor
	url                string
	engineDone         <-chan struct{} // closed when the managed engine exits; nil when attached
	w                  *protocol.Worker
	p                  *project.Project
	d                  *daemon.Daemon
	release            func() // lets compose::* mutations through once the project started
	userTokDeferred    bool   // another live Compose held ~/.iii/compose/tokens/<key>: record once serving
	teardowns          []func()

	// connPath is the token Compose's own connection presents: ownerPath, or on an engine it
	// attaches to the owner credential that engine wrote for this user (package tokens).
	connPath string
}

// onTeardown registers f to run at teardown, before everything registered earlier.
func (s *session) onTeardown(f func()) { s.teardowns = append(s.teardowns, f) }

// teardown undoes the phases that ran, last first.
func (s *session) teardown() {
	for i := len(s.teardowns) - 1; i >= 0; i-- {
		s.teardowns[i]()
	}
}

// loadFile reads the compose file, picks the daemon's namespace and applies the --engine check.
// --namespace names the daemon's namespace only, as in iii: the containers register in the
// file's namespace: (else default), which the engine protects with the project token as before.
func (s *session) loadFile(context.Context) error {
	f, err := s.o.Deps.Load(s.o.File)
	if err != nil {
		return err
	}
	s.ns = cmp.Or(s.o.Namespace, f.Namespace)
	if f.Engine != nil && s.o.EngineURL != "" {
		return errcode.New(errcode.EngineURLConflictsWithManaged, "%s declares engine: (Compose starts that engine); drop --engine %s, or remove the engine: section to attach", f.Path, s.o.EngineURL)
	}
	s.f, s.managed = f, f.Engine != nil && s.o.Up
	return nil
}

// getenv is the session's variable k, "" when unset.
func (s *session) getenv(k string) string {
	if s.o.LookupEnv == nil {
		return ""
	}
	v, _ := s.o.LookupEnv(k)
	return v
}

// prepareState creates the state directory and the project and owner tokens.
func (s *session) prepareState(context.Context) error {
	sd, err := state.Resolve(s.f.Path, s.ns, s.getenv(state.EnvStateDir))
	if err != nil {
		return errcode.New(errcode.StateDirUnavailable, "%w", err)
	}
	if err := sd.Ensure(); err != nil {
		return errcode.New(errcode.StateDirUnavailable, "cannot create %s: %w", sd.Path, err)
	}
	s.sd = sd
	if s.tokPath, _, err = token.Ensure(sd.Path); err != nil {
		return errcode.New(errcode.IOError, "project token in %s: %w", sd.Path, err)
	}
	// Compose's own connection holds the owner token; workers never do. The engine Compose starts
	// gets a fresh one each run; an engine the user runs names a lasting one in its config.
	if s.managed {
		s.ownerPath, err = token.NewOwner(sd.Path)
	} else {
		s.ownerPath, err = token.EnsureOwner(sd.Path)
	}
	if err != nil {
		return errcode.New(errcode.IOError, "owner token in %s: %w", sd.Path, err)
	}
	fmt.Fprintf(s.o.Out, "pid: %d\nowner: %s\nconfig: %s\nlogs: %s\n", os.Getpid(), s.f.Path, sd.Path, sd.Join(state.LogsDir))
	return nil
}

// installPackages installs the package:// containers (--up only) and replaces the project token
// when the adapter version about to run could have exposed it.
func (s *session) installPackages(ctx context.Context) error {
	if !s.o.Up {
		return nil
	}
	pkgs, err := s.o.Deps.Install(ctx, s.f, nil)
	if err != nil {
		return err
	}
	s.pkgs = pkgs
	if ak := project.AdapterKey(s.f); ak != "" {
		msg, err := token.RotateIfExposed(s.sd.Path, s.f.Containers[ak].Source.Name, pkgs[ak].Version)
		if err != nil {
			return errcode.New(errcode.IOError, "replacing the project token: %w", err)
		}
		if msg != "" {
			fmt.Fprintln(s.o.Out, msg)
		}
	}
	return nil
}

// startSupervisor starts the reaper child that outlives a killed Compose, and the supervisor of
// every child process.
func (s *session) startSupervisor(context.Context) error {
	reaper, err := supervisor.StartReaper(s.o.Environ, s.o.Exe, "compose")
	if err != nil {
		return errcode.New(errcode.SpawnFailed, "%w", err)
	}
	s.onTeardown(func() { reaper.Close() })
	s.sup = supervisor.New(reaper)
	s.sup.LogMaxBytes = supervisor.LogMaxBytesOf(s.getenv(supervisor.EnvLogMaxBytes))
	return nil
}

// startManagedEngine picks the engine URL, starts the file's engine when Compose manages it, and
// records this run in the state file.
func (s *session) startManagedEngine(ctx context.Context) error {
	rec, err := s.sd.Load()
	if err != nil {
		return errcode.New(errcode.InvalidStateFile, "%w", err)
	}
	// Children of an earlier run are gone (they died with it); the VM records stay.
	rec.DaemonPID, rec.Engine, rec.Children = os.Getpid(), nil, map[string]state.Child{}
	s.url = cmp.Or(s.o.EngineURL, s.getenv(protocol.EnvURL), protocol.DefaultURL)
	if s.managed {
		s.url = s.f.Engine.URL
		proc, err := startEngine(ctx, s.o, s.f, s.ns, s.sd, s.tokPath, s.ownerPath, s.sup)
		if err != nil {
			return err
		}
		s.engineDone = proc.Done()
		rec.Engine = &state.Child{Container: "engine", PID: proc.PID, Status: "ready", StartedAt: proc.Started}
		s.onTeardown(func() { stopEngine(s.o, s.sd, s.sup, s.f) })
		fmt.Fprintf(s.o.Out, " ✔ Engine %-23s Ready\n", s.url)
	}
	if err := s.sd.Save(rec); err != nil {
		fmt.Fprintf(s.o.Err, "warning: cannot record this run in %s: %v\n", s.sd.Path, err)
	}
	s.connPath = s.ownerPath
	if !s.managed {
		s.connPath = s.attachedOwnerToken()
	}
	return nil
}

// attachedOwnerToken is the token Compose's own connection presents to an engine it attaches
// to: the owner credential that engine wrote for this user, when there is one it can trust, so
// configuration::publish needs no grant; else Compose's own owner token,
// which that engine's config.yaml must grant (an engine that protects namespaces writes no
// credential). An untrusted credential is a warning that says why.
func (s *session) attachedOwnerToken() string {
	path, err := tokens.LookupOwner(s.url)
	if err == nil {
		return path
	}
	if !errors.Is(err, tokens.ErrNoOwner) {
		fmt.Fprintf(s.o.Err, "warning: not using the owner credential of the engine at %s: %v\n", s.url, err)
	}
	return s.ownerPath
}

// vmCaller is what Compose calls the adapter's worker::* through: nil (its own connection) when
// that connection presents Compose's owner token of the project, which the engine's grant ties
// to the project token; else, on an engine it attaches to with that engine's owner credential, a
// connection presenting the project token (projectTokenCaller).
func (s *session) vmCaller() project.Engine {
	if s.connPath == s.ownerPath || s.tokPath == "" {
		return nil
	}
	c := &projectTokenCaller{cfg: protocol.Config{URL: s.url, Namespace: s.f.Namespace, Name: "compose/vm-workers", Version: s.o.Version,
		Description: "iii compose: drives the adapter's VM workers with the project token", TokenFile: s.tokPath}}
	s.onTeardown(c.Close)
	return c
}

// connectDaemon registers compose::* and connects the daemon to the engine, holding mutations
// off until the project has started; once it serves, it records the user's token if
// publishUserToken left that for later, and says "compose serving".
func (s *session) connectDaemon(ctx context.Context) error {
	s.w = protocol.NewWorker(protocol.Config{URL: s.url, Namespace: s.ns, Name: "compose", Version: s.o.Version,
		Description: "iii compose daemon", TokenFile: s.connPath})
	s.p = project.New(project.Options{File: s.f, State: s.sd, EngineURL: s.url, TokenFile: s.tokPath, OwnerTokenFile: s.ownerPath, Managed: s.managed,
		Engine: s.w, VMEngine: s.vmCaller(), Sup: s.sup, Packages: s.pkgs, PackageCache: s.o.PackageCache, Out: s.o.Out, LookupEnv: s.o.LookupEnv})
	s.d = daemon.New(s.ns, s.p, s.o.Deps)
	if err := s.d.Register(s.w); err != nil {
		return err
	}
	s.release = s.d.HoldMutations()
	s.onTeardown(s.release)
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	err := s.w.Start(cctx)
	ccancel()
	if err != nil {
		var pe *protocol.Error
		if !s.managed && errors.As(err, &pe) && pe.Code == engineerr.TokenInvalid {
			return errcode.New(errcode.EngineCallFailed, "connecting the compose daemon to %s: %w. Compose presents its owner token %s on an engine it attaches to; "+
				"where that engine protects namespace '%s', its config.yaml must name that file too:\n%sthen restart the engine",
				s.url, err, s.ownerPath, s.ns, engineconf.OwnerGrant(s.ns, s.tokPath, s.ownerPath))
		}
		return errcode.New(errcode.EngineCallFailed, "connecting the compose daemon to %s: %w", s.url, err)
	}
	s.onTeardown(func() { s.w.Close() })
	if err := checkServing(ctx, s.w, s.ns); err != nil {
		return err
	}
	if s.userTokDeferred {
		s.recordUserToken() // the record publishUserToken saw held was stale: this daemon serves
	}
	fmt.Fprintf(s.o.Out, "compose serving\n  engine: %s\n  namespace: %s\n", s.url, s.ns)
	if s.ns != s.f.Namespace {
		fmt.Fprintf(s.o.Out, "  project namespace: %s\n", s.f.Namespace)
	}
	return nil
}

// publishUserToken records, for the user's `iii call compose::*` from any directory, the token to
// present (removed when Compose stops; a killed Compose's is swept later): the project token on
// an engine Compose starts, whose config lets it call what the owner token registered; on an
// engine the user runs, which may accept nothing but the token that registered compose::*, the
// daemon's own (owner) token. It runs before compose::* is registered, so a caller that sees
// compose::up listed also finds the token; while another live Compose holds the record it
// waits for connectDaemon, which refuses a second daemon for the namespace, to succeed.
func (s *session) publishUserToken(context.Context) error {
	s.userTokDeferred = tokens.Held(s.url, s.ns)
	if !s.userTokDeferred {
		s.recordUserToken()
	}
	return nil
}

// recordUserToken writes the record publishUserToken describes; a failure is a warning naming
// the token file to use instead.
func (s *session) recordUserToken() {
	userTok := s.tokPath
	if !s.managed {
		userTok = s.connPath
	}
	_, remove, err := tokens.Publish(s.url, s.ns, userTok)
	if err != nil {
		fmt.Fprintf(s.o.Err, "warning: cannot record the project token for iii call in ~/%s: %v; "+
			"run iii call compose::* with III_TOKEN_FILE=%s\n", tokens.ProjectDir, err, userTok)
		return
	}
	s.onTeardown(func() { _ = remove() })
}

// startProject starts the containers (--up), then lets compose::* mutations through; from here
// on, teardown lets one in flight finish and stops every container.
func (s *session) startProject(ctx context.Context) error {
	if s.o.Up {
		if _, err := s.d.StartProject(ctx); err != nil {
			fmt.Fprintln(s.o.Out, " ✘ Containers Failed")
			return err
		}
		fmt.Fprintln(s.o.Out, " ✔ Containers Ready")
	}
	s.release()
	s.onTeardown(func() {
		s.d.Settle(SettleTimeout)
		s.p.StopAll(context.Background())
	})
	return nil
}

// wait serves until Ctrl-C, SIGTERM or compose::stop (nil), or until the engine is gone.
func (s *session) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		fmt.Fprintln(s.o.Out, "stopping...")
		return nil
	case <-s.d.Stopped:
		fmt.Fprintln(s.o.Out, "stopping (compose::stop)...")
		return nil
	case <-s.engineDone:
		log := s.sd.Join(state.EngineLogFile)
		return errcode.New(errcode.EngineExited, "the managed engine exited; the end of %s:\n%s", log, supervisor.LogTail(log, 10))
	case <-s.w.Done():
		return errcode.New(errcode.EngineCallFailed, "the daemon lost the engine: %w", s.w.Err())
	}
}

// startEngine writes engine-config.yaml and starts `iii --config` as a child, then waits until
// it listens.
func startEngine(ctx context.Context, o Options, f *composefile.File, daemonNS string, sd state.Dir, tokPath, ownerPath string, sup *supervisor.Supervisor) (*supervisor.Process, error) {
	host, port, err := engineconf.HostPort(f.Engine.URL)
	if err != nil {
		return nil, errcode.New(errcode.InvalidManagedEngineURL, "%s: %w", f.Path, err)
	}
	addr := net.JoinHostPort(host, fmt.Sprint(port))
	if c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
		c.Close()
		return nil, errcode.New(errcode.ManagedEngineListenerUnavailable, "%s is already taken by another process; stop it or change engine.url in %s", addr, f.Path)
	}
	in := engineconf.Input{URL: f.Engine.URL, GraceMS: f.Engine.RegistrationNamespaceGraceMS, Workers: f.Engine.Workers,
		WorkerOrder: f.Engine.WorkerOrder, Namespace: f.Namespace, DaemonNamespace: daemonNS, TokenFile: tokPath, OwnerTokenFile: ownerPath, SandboxAdapter: project.AdapterPrefix(f)}
	if f.Engine.Sandbox != nil {
		in.SandboxNamespace = f.Engine.Sandbox.NamespaceFor(f.Namespace)
	}
	data, err := engineconf.Render(in)
	if err != nil {
		return nil, errcode.New(errcode.InvalidManagedEngineURL, "%s: %w", f.Path, err)
	}
	cfg, err := sd.WriteEngineConfig(data)
	if err != nil {
		return nil, errcode.New(errcode.IOError, "writing %s: %w", cfg, err)
	}
	env := []string{}
	for _, kv := range o.Environ {
		if !strings.HasPrefix(kv, "III_") || strings.HasPrefix(kv, "III_COMPOSE_STATE_DIR=") {
			env = append(env, kv)
		}
	}
	proc, err := sup.Start(supervisor.Spec{Name: "engine", Argv: []string{o.Exe, "--config", cfg}, Dir: f.Dir, Env: env, LogPath: sd.Join(state.EngineLogFile)})
	if err != nil {
		return nil, errcode.New(errcode.EngineSpawnFailed, "starting %s --config %s: %w", o.Exe, cfg, err)
	}
	deadline := time.Now().Add(EngineStartupTimeout)
	for {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return proc, nil
		}
		select {
		case <-proc.Done():
			return nil, errcode.New(errcode.EngineExited, "the managed engine exited before it listened on %s; the end of %s:\n%s", addr, sd.Join(state.EngineLogFile), supervisor.LogTail(sd.Join(state.EngineLogFile), 10))
		case <-ctx.Done():
			_, _ = sup.Stop("engine", time.Second)
			return nil, errcode.New(errcode.OperationCancelled, "interrupted while the engine started: %w", context.Cause(ctx))
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

// checkServing fails DAEMON_ALREADY_SERVING when compose::up in ns belongs to another worker: the
// engine refused this daemon's functions because another daemon serves the namespace.
func checkServing(ctx context.Context, w *protocol.Worker, ns string) error {
	raw, err := w.Call(ctx, protocol.FnListFunctions, map[string]string{"namespace": ns})
	if err != nil {
		return errcode.New(errcode.EngineCallFailed, "engine::functions::list: %w", err)
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
		return errcode.New(errcode.EngineCallFailed, "engine::functions::list: %w", err)
	}
	for _, fn := range out.Functions {
		if fn.FunctionID == daemon.FnUp && fn.Namespace == ns && fn.WorkerID != w.WorkerID() {
			return errcode.New(errcode.DaemonAlreadyServing, "another Compose daemon (worker %s) already serves namespace '%s' on this engine; stop it (iii call compose::stop -n %s) or use another --namespace", fn.WorkerID, ns, ns)
		}
	}
	return nil
}
