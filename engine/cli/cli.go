// Package cli holds the engine's command-line entry points: the engine itself and `iii call`.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/cluster"
	"github.com/iii-go/iii/engine/config"
	"github.com/iii-go/iii/engine/configworker"
	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/httpfn"
	"github.com/iii-go/iii/engine/sandbox"
	"github.com/iii-go/iii/engine/telemetry"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/tokens"
)

const engineUsage = `Usage: iii [--config FILE]

Runs the iii engine: the worker listeners (ws://127.0.0.1:49134 unless config.yaml's
iii-worker-manager entries say otherwise; every entry is a listener, which rbac: and
middleware_function_id may gate), the configuration worker and the sandbox router, and
iii-stream (stream::*, its WebSocket port, default 127.0.0.1:3112) when config.yaml declares it.
SIGINT or SIGTERM stops it. With no namespaces: in its config it writes an owner credential
for a Compose of this user to ~/.iii/engine/owners/<host>_<port> (mode 0600, removed when it
stops), which lets that Compose publish configuration entries here with no grant.

Flags:
  -c, --config FILE     engine configuration (default config.yaml; missing = defaults)
  --no-update-check     accepted for compatibility; this engine never checks for updates
  -h, --help            show this help
`

// EngineWorker serves, in the engine's process, an engine worker config.yaml declares whose code
// lives outside the engine module (iii-stream: the iii binary hands its own). It is called once
// the listener is bound and before the engine serves; what it binds must fail here, with a coded
// error that stops the engine. It connects to env.URL as a worker and keeps serving until stop,
// which the engine calls when it stops.
type EngineWorker func(ctx context.Context, env EngineWorkerEnv) (stop func(), err error)

// EngineWorkerEnv is what an EngineWorker gets from the engine.
type EngineWorkerEnv struct {
	URL       string // the engine's own listener, ws://host:port
	TokenFile string // the default namespace's project token file, "" when it is open
	Version   string
	Config    *config.Config
	Log       *slog.Logger
	// LookupEnv is the engine's environment (os.LookupEnv in the binary): $III_COMPOSE_DIR, where
	// a relative file_path lives under Compose. nil is an empty one.
	LookupEnv func(string) (string, bool)
}

// RunEngine runs the engine with the given arguments and returns the process exit code; workers
// serves the declared engine workers by name (iii-stream); config.yaml and the configuration
// worker's values expand their placeholders from lookupEnv (os.LookupEnv in the binary).
func RunEngine(version string, args []string, workers map[string]EngineWorker, lookupEnv func(string) (string, bool)) int {
	return errcode.Exit(os.Stderr, runEngine(version, args, workers, lookupEnv), errcode.Unknown)
}

func runEngine(version string, args []string, workers map[string]EngineWorker, lookupEnv func(string) (string, bool)) error {
	path, help, err := parseEngineArgs(args)
	if err != nil || help {
		return err
	}
	cfg, err := loadConfig(path, lookupEnv)
	if err != nil {
		return err
	}
	logs := telemetry.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log := slog.New(logs)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bound, err := listen(cfg)
	if err != nil {
		return err
	}
	ln := bound[0].Net
	policies := namespacePolicies(cfg)
	closeAll := func() {
		for _, b := range bound {
			b.Net.Close()
		}
	}
	httpInv, err := httpfn.New(httpSecurity(cfg.HTTPSecurity), lookupEnv)
	if err != nil {
		closeAll()
		return err
	}
	ownerFile, removeOwner := ownerCredential(ln.Addr().String(), len(policies) > 0, log)
	defer removeOwner()
	eng := core.New(core.Options{Grace: time.Duration(cfg.GraceMS) * time.Millisecond, Namespaces: policies, Logger: log,
		OwnerTokenFile: ownerFile, AllowedOrigins: bound[0].AllowedOrigins, HandshakeTimeout: bound[0].HandshakeTimeout, HTTP: httpInv})
	store, err := configworker.New(cfg.ConfigDir, log, lookupEnv)
	if err != nil {
		closeAll()
		return errcode.New(errcode.AdapterError, "loading configuration entries from %s: %w", cfg.ConfigDir, err)
	}
	store.Install(eng)
	if cfg.Cluster != nil {
		if err := eng.JoinCluster(cluster.Options{URL: cfg.Cluster.URL, CredsFile: cfg.Cluster.CredsFile, NkeyFile: cfg.Cluster.NkeyFile,
			TLSCertFile: cfg.Cluster.TLSCertFile, TLSKeyFile: cfg.Cluster.TLSKeyFile, TLSCAFile: cfg.Cluster.TLSCAFile,
			Insecure: cfg.Cluster.Insecure, KeyFile: cfg.Cluster.KeyFile, Name: ln.Addr().String(), Logger: log}); err != nil {
			closeAll()
			return err
		}
		if err := eng.ServeClusterChannels(core.AdvertiseURL(ln.Addr().String())); err != nil {
			closeAll()
			return errcode.New(errcode.ListenFailed, "cluster: offering stream channels: %w", err)
		}
		log.Info("joined the engine cluster")
	}
	var bind *sandbox.Binding
	if cfg.Sandbox != nil {
		bind = &sandbox.Binding{Adapter: cfg.Sandbox.Adapter, Namespace: cfg.Sandbox.Namespace, Source: "config"}
	}
	sandbox.New(eng, bind).Install()
	obs, err := installObservers(ctx, eng, store, version, logs, log, ln, builtinComponents(cfg, bind))
	if err != nil {
		closeAll()
		return err
	}
	defer obs.Stop()
	stopStream, err := startStream(ctx, cfg, workers, ln.Addr().String(), version, log, lookupEnv)
	if err != nil {
		closeAll()
		return err
	}
	defer stopStream()
	logStartup(cfg, bind, bound, version, log)
	if err := eng.ServeAll(ctx, bound); err != nil && ctx.Err() == nil {
		return errcode.New(errcode.ListenFailed, "%w", err)
	}
	fmt.Fprintln(os.Stderr, "iii engine stopped")
	return nil
}

// parseEngineArgs parses the engine's flags and returns the configuration file's path; help
// reports that --help was asked for, and printed.
func parseEngineArgs(args []string) (path string, help bool, err error) {
	fs := flag.NewFlagSet("iii", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&path, "config", "", "")
	fs.StringVar(&path, "c", "", "")
	fs.Bool("no-update-check", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(engineUsage)
			return "", true, nil
		}
		return "", false, errcode.Usagef(errcode.Usage, "%w\n%s", err, engineUsage)
	}
	if fs.NArg() > 0 {
		return "", false, errcode.Usagef(errcode.Usage, "unexpected argument %q. Run 'iii --help' to see available commands.", fs.Arg(0))
	}
	return path, false, nil
}

// namespacePolicies returns the token files of each namespace cfg declares, by name.
func namespacePolicies(cfg *config.Config) map[string]core.NamespacePolicy {
	policies := map[string]core.NamespacePolicy{}
	for _, n := range cfg.Namespaces {
		policies[n.Name] = core.NamespacePolicy{TokenFile: n.TokenFile, OwnerTokenFile: n.OwnerTokenFile}
	}
	return policies
}

// startStream starts iii-stream, when cfg declares it, from workers, connected to the engine
// at addr with the default namespace's token; the returned stop stops it (and does nothing
// when cfg does not declare it), with the engine's environment lookupEnv. A build that cannot
// serve it fails CONFIG_UNSUPPORTED.
func startStream(ctx context.Context, cfg *config.Config, workers map[string]EngineWorker, addr, version string, log *slog.Logger, lookupEnv func(string) (string, bool)) (stop func(), err error) {
	if cfg.Stream == nil {
		return func() {}, nil
	}
	serve := workers["iii-stream"]
	if serve == nil {
		return nil, errcode.New(errcode.ConfigUnsupported, "%s declares iii-stream, which this build of the engine cannot serve", cfg.Path)
	}
	env := EngineWorkerEnv{URL: "ws://" + addr, Version: version, Config: cfg, Log: log.With("worker", "iii-stream"), LookupEnv: lookupEnv}
	for _, n := range cfg.Namespaces {
		if n.Name == "default" {
			env.TokenFile = n.TokenFile
		}
	}
	return serve(ctx, env)
}

// logStartup logs how the sandbox router is bound and which namespaces are protected, and
// prints the listeners the engine serves on.
func logStartup(cfg *config.Config, bind *sandbox.Binding, bound []core.Bound, version string, log *slog.Logger) {
	if bind != nil {
		log.Info("sandbox router bound", "adapter", bind.Adapter, "namespace", bind.Namespace)
	} else {
		log.Info("sandbox router has no adapter bound; sandbox::* answers S303")
	}
	for _, n := range cfg.Namespaces {
		log.Info("namespace protected by a project token", "namespace", n.Name, "owner_token", n.OwnerTokenFile != "")
	}
	fmt.Fprintf(os.Stderr, "iii engine %s listening on ws://%s\n", version, bound[0].Net.Addr())
	for _, b := range bound[1:] {
		fmt.Fprintf(os.Stderr, "iii engine listener %s on ws://%s%s\n", b.Name, b.Net.Addr(), gateSummary(b.Listener))
	}
}

// listen opens every listener of cfg, the main one first; a port that cannot be opened closes
// the others and fails LISTEN_FAILED naming the listener and its line in config.yaml.
func listen(cfg *config.Config) ([]core.Bound, error) {
	var bound []core.Bound
	for _, l := range cfg.Listeners {
		addr := net.JoinHostPort(l.Host, strconv.Itoa(l.Port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, b := range bound {
				b.Net.Close()
			}
			where := ""
			if l.Line > 0 && cfg.Path != "" {
				where = fmt.Sprintf(" (%s line %d)", cfg.Path, l.Line)
			}
			return nil, errcode.New(errcode.ListenFailed, "cannot listen on %s for listener %s%s: %w", addr, l.Name, where, err)
		}
		bound = append(bound, core.Bound{Net: ln, Listener: core.Listener{Name: l.Name, AllowedOrigins: l.AllowedOrigins,
			HandshakeTimeout: time.Duration(l.HandshakeTimeoutMS) * time.Millisecond, Middleware: l.MiddlewareFunctionID, RBAC: l.RBAC}})
	}
	return bound, nil
}

// gateSummary says what gates a listener, for its start line.
func gateSummary(l core.Listener) string {
	s := ""
	if l.RBAC != nil {
		s = " (rbac"
		if l.RBAC.AuthFunctionID != "" {
			s += ", auth " + l.RBAC.AuthFunctionID
		}
		s += ")"
	}
	if l.Middleware != "" {
		s += " (middleware " + l.Middleware + ")"
	}
	return s
}

// ownerCredential writes the owner credential a Compose of this user presents when it attaches
// to addr (package tokens) and returns its path and its removal at a clean stop. An engine
// that protects namespaces writes none, so only a grant in its config.yaml gives owner rights,
// and drops one a dead engine left at addr. A failure costs only the credential: a warning.
func ownerCredential(addr string, protected bool, log *slog.Logger) (string, func()) {
	if protected {
		if err := tokens.ClearOwner(addr); err != nil {
			log.Warn("cannot remove a stale owner credential", "addr", addr, "err", err)
		}
		return "", func() {}
	}
	path, remove, err := tokens.WriteOwner(addr)
	if err != nil {
		log.Warn("no owner credential for Compose: attaching it needs a namespaces: grant", "dir", "~/"+tokens.OwnerDir, "err", err)
		return "", func() {}
	}
	log.Info("owner credential for a Compose of this user written", "path", path)
	return path, func() {
		if err := remove(); err != nil {
			log.Warn("cannot remove the owner credential", "path", path, "err", err)
		}
	}
}

// loadConfig reads the config file; a missing default file means defaults.
func loadConfig(path string, lookupEnv func(string) (string, bool)) (*config.Config, error) {
	explicit := path != ""
	if !explicit {
		path = "config.yaml"
	}
	cfg, err := config.Load(path, lookupEnv)
	if err == nil {
		return cfg, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		if explicit {
			return nil, errcode.New(errcode.ConfigNotFound, "config file %s does not exist", path)
		}
		abs, _ := filepath.Abs(".")
		fmt.Fprintf(os.Stderr, "no config.yaml found in %s; starting with defaults\n", abs)
		return config.Default(), nil
	}
	ce := errcode.As(err, errcode.ConfigInvalid)
	return nil, &errcode.Error{Code: ce.Code, Message: path + ": " + ce.Message, Err: err}
}
