// Command iii is the iii platform in one binary: the engine, `iii call`, `iii compose`,
// `iii sandbox`, `iii update` and `iii doctor`. The first word picks the part; everything else is handed to it unchanged.
package main

import (
	"fmt"
	"io"
	"os"

	compose "github.com/iii-go/iii/compose/cli"
	"github.com/iii-go/iii/doctor"
	engine "github.com/iii-go/iii/engine/cli"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/enginestream"
	"github.com/iii-go/iii/internal/sandboxcli"
	updater "github.com/iii-go/iii/updater/cli"
)

const usage = `iii: the iii engine, its function caller, Compose, sandbox shells, the updater and the doctor.

Usage:
  iii [--config FILE]            run the engine (default ws://127.0.0.1:49134)
  iii call FN [k=v ...]          call a function through a running engine (aliases: trigger, t)
  iii compose [up|--up] [...]    run a project's workers from worker-compose.yaml
  iii sandbox shell SANDBOX_ID   an interactive shell in a sandbox (--image NAME: in a new one)
  iii sandbox exec SANDBOX_ID -- CMD [ARG...]   run a command in a sandbox, output streamed
  iii update [TARGET]            update iii to the newest release
  iii doctor [--fix] [...]       check this machine and a project against the 0.26 upgrade guide
  iii --version                  print the version

Run 'iii <command> --help' for the flags of a command.
`

// engineWorkers are the engine workers this binary serves in the engine's process when
// config.yaml declares them.
var engineWorkers = map[string]engine.EngineWorker{"iii-stream": enginestream.Serve}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func run(args []string, stdout io.Writer) int {
	version := currentVersion()
	if len(args) == 0 {
		return engine.RunEngine(version, args, engineWorkers, os.LookupEnv)
	}
	switch args[0] {
	case "--version", "-v", "-V", "version":
		fmt.Fprintln(stdout, version)
		return 0
	case "--help", "-h", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "call", "trigger", "t":
		return engine.RunCall(args[1:], os.Getenv)
	case "compose":
		return compose.Run(version, args[1:], os.LookupEnv, os.Environ())
	case "sandbox":
		return sandboxcli.Run(args[1:], os.Getenv, sandboxcli.IO{Stdin: os.Stdin, Stdout: stdout, Stderr: os.Stderr})
	case "update":
		return updater.Run(version, args[1:], os.Getenv)
	case "doctor":
		return doctor.Run(args[1:], os.LookupEnv)
	case "engine":
		return engine.RunEngine(version, args[1:], engineWorkers, os.LookupEnv)
	}
	if args[0] != "" && args[0][0] == '-' {
		return engine.RunEngine(version, args, engineWorkers, os.LookupEnv)
	}
	return errcode.Exit(os.Stderr, errcode.Usagef(errcode.UnknownCommand, "unknown command %q. Run 'iii --help' to see available commands.", args[0]), errcode.UnknownCommand)
}
