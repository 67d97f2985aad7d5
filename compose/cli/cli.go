// Package cli is the `iii compose` command line: flag parsing and its combination rules, then
// `build` (prepare only) or the runtime (prepare, then serve.Run). Every error prints as
// error[CODE]: message on stderr with a non-zero exit.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/daemon"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/fileedit"
	"github.com/iii-go/iii/compose/prepare"
	"github.com/iii-go/iii/compose/project"
	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/compose/serve"
	"github.com/iii-go/iii/compose/state"
	"github.com/iii-go/iii/compose/supervisor"
)

// DefaultFile is the compose file used without -f.
const DefaultFile = "worker-compose.yaml"

const usage = `Usage:
  iii compose [--engine URL] [-n NS] [--up [-f FILE] [--frozen]]
  iii compose [--engine URL] [-n NS] up [-f FILE] [--frozen]   (iii's form; the same as --up)
  iii compose build [-f FILE] [--frozen]
  iii compose logs [WORKER] [--tail N] [-F|--follow] [--stream stdout|stderr] (see logs --help)

Run a project's workers from worker-compose.yaml.

  (no --up)          start only the Compose daemon (the compose worker); ./worker-compose.yaml,
                     if present, supplies its defaults
  --up, up           also start the file's engine (when engine: is a mapping) and its containers;
                     once they are up Compose prints "up: N of M changed in T" (or "up: nothing to
                     do (M already in place) in T")
  -f, --file FILE    the compose file (default ./worker-compose.yaml); only with --up or up
  --frozen           start from worker-compose.lock as is: never resolve, never write the compose
                     file or the lock; only with --up or up
  --engine URL       attach to this engine (beats III_URL and ws://127.0.0.1:49134)
  -n, --namespace NS the daemon's namespace: where compose::* is served and the key of the state
                     directory. The containers register in the file's namespace: (else default);
                     without -n the daemon serves that namespace too
  build              resolve and download every package:// worker and write the lock, without an
                     engine; --frozen checks the lock and downloads only

Flags may come before or after up.

Environment: III_URL, III_REGISTRY_URL (the worker registry), III_COMPOSE_STATE_DIR (state and
package cache), III_TARGET (override the host target), III_COMPOSE_LOG_MAX_BYTES (worker log
rotation size, default 10 MiB), III_COMPOSE_MAX_PARALLEL_STARTS (containers started at once,
default 4).
`

// upUsage is `iii compose up --help`.
const upUsage = `Usage:
  iii compose [--engine URL] [-n NS] up [-f FILE] [--frozen]

Start the Compose daemon with the project of FILE brought up first: the file's engine (when
engine: is a mapping), then its containers; then print
  up: N of M changed in T        or        up: nothing to do (M already in place) in T
and serve compose::* in namespace NS (else the file's namespace:) until Ctrl-C, SIGTERM or
compose::stop. The same as iii compose --up; --engine and -n may come before or after up.

  -f, --file FILE    the compose file (default ./worker-compose.yaml)
  --frozen           start from worker-compose.lock as is
  --engine URL       attach to this engine (a file with engine: starts its own instead)
  -n, --namespace NS the daemon's namespace (compose::*); containers use the file's namespace:
`

type options struct {
	build, up, frozen, help bool
	// upWord is the `up` subcommand (iii's spelling of --up); its --help is upUsage.
	upWord            bool
	file              string
	fileSet           bool
	namespace, engine string
	nsSet, engineSet  bool
}

func parse(args []string) (options, error) {
	o := options{file: DefaultFile}
	if len(args) > 0 && args[0] == "build" {
		o.build, args = true, args[1:]
	}
	err := scanArgs(args, "iii compose", func(name, word string, value func() (string, error)) error {
		var err error
		switch name {
		case "-h", "--help", "help":
			o.help = true
		case "--up":
			o.up = true
		case "up":
			// iii's subcommand: the flags of iii compose are global, so they read the same
			// before or after it. Once only, and not under build.
			if o.upWord || o.build {
				return errcode.Usagef(errcode.UsageError, "unknown argument %q; run 'iii compose --help'", word)
			}
			o.up, o.upWord = true, true
		case "--frozen":
			o.frozen = true
		case "-f", "--file":
			o.file, err = value()
			o.fileSet = true
		case "-n", "--namespace":
			o.namespace, err = value()
			o.nsSet = true
		case "--engine":
			o.engine, err = value()
			o.engineSet = true
		default:
			return errcode.Usagef(errcode.UsageError, "unknown argument %q; run 'iii compose --help'", word)
		}
		return err
	})
	if err != nil {
		return o, err
	}
	return o, nil
}

// scanArgs walks command-line words the way iii compose takes them: "--name=value", "--name
// value" or a bare word. fn gets the flag name (the whole word unless it is "--name=…"), the word
// itself, and value, which reads the flag's value from the word or takes the next one; cmd is the
// command whose --help a missing value points at.
func scanArgs(args []string, cmd string, fn func(name, word string, value func() (string, error)) error) error {
	for i := 0; i < len(args); i++ {
		word := args[i]
		name, inline, hasInline := strings.Cut(word, "=")
		if !strings.HasPrefix(name, "--") {
			name, hasInline = word, false
		}
		value := func() (string, error) {
			if hasInline {
				return inline, nil
			}
			if i+1 >= len(args) {
				return "", errcode.Usagef(errcode.UsageError, "%s needs a value; run '%s --help'", name, cmd)
			}
			i++
			return args[i], nil
		}
		if err := fn(name, word, value); err != nil {
			return err
		}
	}
	return nil
}

// check applies the flag-combination rules.
func (o options) check() error {
	if o.build {
		var bad []string
		if o.up {
			bad = append(bad, "--up")
		}
		if o.engineSet {
			bad = append(bad, "--engine")
		}
		if o.nsSet {
			bad = append(bad, "--namespace")
		}
		if len(bad) > 0 {
			return errcode.Usagef(errcode.BuildConflictsWithServeOptions, "iii compose build takes only -f and --frozen; %s belong(s) to the daemon (iii compose [--engine URL] [-n NS] [--up])", strings.Join(bad, ", "))
		}
		return nil
	}
	if o.fileSet && !o.up {
		return errcode.Usagef(errcode.FileRequiresUp, "-f/--file %s works only with --up or up (iii compose up -f %s)", o.file, o.file)
	}
	if o.frozen && !o.up {
		return errcode.Usagef(errcode.FrozenRequiresUp, "--frozen works only with --up or up (iii compose up --frozen) or with build (iii compose build --frozen)")
	}
	if o.nsSet && !composefile.ValidNamespace(o.namespace) {
		return errcode.Usagef(errcode.InvalidNamespace, "--namespace %q is not a namespace: use lowercase letters, digits, _ and -", o.namespace)
	}
	return nil
}

// Run runs `iii compose ARGS` in the environment lookupEnv (os.LookupEnv in the binary), whose
// whole list environ (os.Environ() in the binary) the reaper and the managed engine inherit, and
// returns the process exit code.
func Run(version string, args []string, lookupEnv func(string) (string, bool), environ []string) int {
	if supervisor.IsReaper(getenv(lookupEnv)) {
		return supervisor.RunReaper(os.Stdin)
	}
	return run(context.Background(), version, args, os.Stdout, os.Stderr, lookupEnv, environ)
}

// getenv is lookupEnv's value of a variable, "" when unset.
func getenv(lookupEnv func(string) (string, bool)) func(string) string {
	return func(k string) string {
		v, _ := lookupEnv(k)
		return v
	}
}

func run(ctx context.Context, version string, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool), environ []string) int {
	env := getenv(lookupEnv)
	if len(args) > 0 && args[0] == "logs" {
		return runLogs(ctx, args[1:], stdout, stderr, lookupEnv)
	}
	o, err := parse(args)
	if err != nil {
		return errcode.Exit(stderr, err)
	}
	if o.help {
		if o.upWord {
			fmt.Fprint(stdout, upUsage)
		} else {
			fmt.Fprint(stdout, usage)
		}
		return 0
	}
	if err := o.check(); err != nil {
		return errcode.Exit(stderr, err)
	}
	cache, err := registry.CacheDir(env(state.EnvStateDir))
	if err != nil {
		return errcode.Exit(stderr, err)
	}
	// --namespace is the daemon's: the packages are prepared for the project's namespace, the
	// file's (where the adapter and the other containers run).
	popts := prepare.Options{Frozen: o.frozen, Build: o.build, EngineURL: o.engine, CacheDir: cache, Lookup: lookupEnv, Out: stdout}
	if o.build {
		res, err := prepare.Run(ctx, o.file, popts)
		if err != nil {
			return errcode.Exit(stderr, err)
		}
		fmt.Fprintf(stdout, "✓ built %s: %d package(s) in %s\n", res.File.Path, len(res.Packages), cache)
		return 0
	}
	var first *prepare.Result
	if o.up {
		// Every check that needs no engine runs before anything starts.
		if first, err = prepare.Run(ctx, o.file, popts); err != nil {
			return errcode.Exit(stderr, err)
		}
	}
	install := func(ctx context.Context, f *composefile.File, update []string) (map[string]project.Package, error) {
		res := first
		first = nil
		if res == nil || res.File.Path != f.Path || len(update) > 0 {
			p := popts
			p.Update = update
			var err error
			if res, err = prepare.Run(ctx, f.Path, p); err != nil {
				return nil, err
			}
		}
		return packages(res), nil
	}
	sopts := serve.Options{Version: version, File: o.file, Up: o.up, EngineURL: o.engine, LookupEnv: lookupEnv, Environ: environ,
		Namespace: o.namespace, PackageCache: cache, Out: stdout, Err: stderr,
		Deps: daemon.Deps{
			Load:            func(path string) (*composefile.File, error) { return composefile.Load(path, lookupEnv) },
			Install:         install,
			AddContainer:    fileedit.AddContainer,
			SetVersion:      fileedit.SetVersion,
			RemoveContainer: fileedit.RemoveContainer,
		}}
	if err := serve.Run(ctx, sopts); err != nil {
		return errcode.Exit(stderr, err)
	}
	return 0
}

// packages converts prepared packages into what the runtime starts.
func packages(res *prepare.Result) map[string]project.Package {
	out := make(map[string]project.Package, len(res.Packages))
	for k, p := range res.Packages {
		var def any
		if p.DefaultConfig != nil {
			def = p.DefaultConfig
		}
		out[k] = project.Package{Name: p.Name, Version: p.Version, Kind: p.Type, Exec: p.Exec, Dir: p.Dir, DefaultConfig: def}
	}
	return out
}
