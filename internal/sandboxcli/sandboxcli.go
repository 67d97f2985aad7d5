// Package sandboxcli is `iii sandbox`: an interactive shell in a sandbox from the user's own
// terminal (`iii sandbox shell`), and a command run in one with its output streamed
// (`iii sandbox exec`). Both drive sandbox::process::* through a running engine, as its caller
// with the credentials `iii call` presents (engine/cli.ConnectCLI): whoever may call
// sandbox::exec may use them, nobody else.
package sandboxcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/cli"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

const usage = `Usage: iii sandbox COMMAND [flags]

Commands:
  shell SANDBOX_ID               an interactive shell in a running sandbox
  shell --image NAME [--keep]    the same in a new sandbox of image NAME, stopped when the
                                 shell ends unless --keep
  exec SANDBOX_ID -- CMD [ARG...]  run CMD in the sandbox, its output streamed to stdout and
                                 stderr; exits with its exit code

Run 'iii sandbox shell --help' or 'iii sandbox exec --help' for their flags.
`

const shellUsage = `Usage: iii sandbox shell SANDBOX_ID [flags]
       iii sandbox shell --image NAME [--keep] [flags]

Opens an interactive login shell (bash when the image has it, else sh) on a terminal in the
sandbox, from this terminal: stdin must be a terminal, which is put in raw mode and restored
when the shell ends, iii is signalled or the engine goes away. The window size follows this
terminal's. TERM is this terminal's $TERM, else xterm-256color. Exits with the shell's exit code
(128+N when signal N ended it).

Flags:
  --image NAME          create a sandbox of image NAME (sandbox::create) for the shell
  --keep                with --image: leave the sandbox running when the shell ends
  --workdir DIR         start the shell in DIR
  -e, --env KEY=VALUE   set a variable in the shell's environment (repeatable)
  --engine URL          the engine (default $III_URL, else ws://127.0.0.1:49134)
  -h, --help            show this help

Token: as 'iii call' (III_TOKEN_FILE, III_TOKEN, else the project token Compose recorded).
`

const execUsage = `Usage: iii sandbox exec SANDBOX_ID [flags] -- CMD [ARG...]

Runs CMD in the sandbox (sandbox::process::start) and streams its stdout and stderr here as it
writes them, with no size cap; exits with its exit code (128+N when signal N ended it). SIGINT,
SIGTERM or SIGHUP to iii is sent on to CMD; a second one leaves CMD running and exits.

Flags:
  -i, --stdin           send this process's stdin to CMD (EOF when it ends)
  --workdir DIR         run CMD in DIR
  -e, --env KEY=VALUE   set a variable in CMD's environment (repeatable)
  --timeout-ms N        kill CMD after N milliseconds (default: no bound)
  --engine URL          the engine (default $III_URL, else ws://127.0.0.1:49134)
  -h, --help            show this help

Token: as 'iii call' (III_TOKEN_FILE, III_TOKEN, else the project token Compose recorded).
`

// IO is where a command reads and writes: the process's own files in the binary.
type IO struct {
	Stdin  *os.File
	Stdout io.Writer
	Stderr io.Writer
}

// Run runs `iii sandbox ARGS...` and returns the process exit code.
func Run(args []string, getenv func(string) string, stdio IO) int {
	if len(args) == 0 {
		return errcode.Exit(stdio.Stderr, errcode.Usagef(errcode.Usage, "missing COMMAND: `iii sandbox shell` or `iii sandbox exec`. Run 'iii sandbox --help' for their use."), errcode.Usage)
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdio.Stdout, usage)
		return 0
	case "shell":
		return runShell(args[1:], getenv, stdio)
	case "exec":
		return runExec(args[1:], getenv, stdio)
	}
	return errcode.Exit(stdio.Stderr, errcode.Usagef(errcode.UnknownCommand, "unknown command `iii sandbox %s`. Run 'iii sandbox --help' to see its commands.", args[0]), errcode.Usage)
}

// flags are the words of shell and exec.
type flags struct {
	sandboxID string
	image     string
	keep      bool
	workdir   string
	env       map[string]string
	engine    string
	stdin     bool
	timeoutMS int64
	argv      []string // after --
	help      bool
}

// parse reads the words of command cmd ("shell" or "exec"): flags as --name value or
// --name=value, anywhere before --; the first bare word is SANDBOX_ID.
func parse(cmd string, args []string) (*flags, error) {
	f := &flags{}
	for s := cli.NewWords(args); s.Next(); {
		arg, name, next := s.Arg, s.Name, s.Value
		if arg == "--" {
			if cmd != "exec" {
				return nil, fmt.Errorf("`iii sandbox %s` takes no command after --; it runs a login shell", cmd)
			}
			f.argv = s.Rest()
			break
		}
		var err error
		switch {
		case arg == "-h" || arg == "--help":
			f.help = true
		case name == "--engine":
			f.engine, err = next()
		case name == "--workdir":
			f.workdir, err = next()
		case name == "-e" || name == "--env":
			var kv string
			if kv, err = next(); err == nil {
				err = f.addEnv(name, kv)
			}
		case cmd == "shell" && name == "--image":
			f.image, err = next()
		case cmd == "shell" && arg == "--keep":
			f.keep = true
		case cmd == "exec" && (arg == "-i" || arg == "--stdin"):
			f.stdin = true
		case cmd == "exec" && name == "--timeout-ms":
			var v string
			if v, err = next(); err == nil {
				if _, serr := fmt.Sscan(v, &f.timeoutMS); serr != nil || f.timeoutMS <= 0 || fmt.Sprint(f.timeoutMS) != v {
					err = fmt.Errorf("--timeout-ms must be a positive integer, got `%s`", v)
				}
			}
		case strings.HasPrefix(arg, "-"):
			err = fmt.Errorf("unknown flag %s for `iii sandbox %s`", arg, cmd)
		case f.sandboxID == "":
			f.sandboxID = arg
		default:
			err = fmt.Errorf("unexpected argument `%s`: `iii sandbox %s` takes one SANDBOX_ID", arg, cmd)
		}
		if err != nil {
			return nil, err
		}
	}
	if f.help {
		return f, nil
	}
	if err := f.check(cmd); err != nil {
		return nil, err
	}
	return f, nil
}

// addEnv records KEY=VALUE kv of flag name.
func (f *flags) addEnv(name, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("%s wants KEY=VALUE, got `%s`", name, kv)
	}
	if f.env == nil {
		f.env = map[string]string{}
	}
	f.env[k] = v
	return nil
}

// check refuses what command cmd cannot run: a missing or doubled target, a command missing
// after --, --keep without --image.
func (f *flags) check(cmd string) error {
	switch {
	case cmd == "shell" && f.image != "" && f.sandboxID != "":
		return errors.New("give SANDBOX_ID or --image NAME, not both")
	case cmd == "shell" && f.image == "" && f.sandboxID == "":
		return errors.New("missing SANDBOX_ID (or --image NAME to create a sandbox). Try: `iii sandbox shell <sandbox_id>`")
	case cmd == "shell" && f.keep && f.image == "":
		return errors.New("--keep applies to a sandbox created with --image")
	case cmd == "exec" && f.sandboxID == "":
		return errors.New("missing SANDBOX_ID. Try: `iii sandbox exec <sandbox_id> -- <cmd> [args...]`")
	case cmd == "exec" && len(f.argv) == 0:
		return errors.New("missing the command after --. Try: `iii sandbox exec <sandbox_id> -- <cmd> [args...]`")
	}
	return nil
}

// connect reaches the engine of f as `iii call` does.
func connect(f *flags, getenv func(string) string, name string) (*protocol.Worker, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cli.ConnectCLI(ctx, cli.EngineURL(f.engine, getenv), name, protocol.DefaultNamespace, getenv)
}

// callErr is a failed call as the CLI reports it: a function error keeps its code (an S-code of
// the sandbox), anything else is CALL_FAILED; both name the function.
func callErr(fn string, err error) error {
	var perr *protocol.Error
	if errors.As(err, &perr) {
		return errcode.New(perr.Code, "%s: %s", fn, perr.Message)
	}
	return errcode.New(errcode.CallFailed, "%s: %w", fn, err)
}

// createSandbox creates a sandbox of image for a shell (sandbox::create).
func createSandbox(w *protocol.Worker, image string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	raw, err := w.Call(ctx, "sandbox::create", map[string]string{"image": image}, protocol.WithTimeout(5*time.Minute))
	if err != nil {
		return "", callErr("sandbox::create", err)
	}
	var rep struct {
		SandboxID string `json:"sandbox_id"`
	}
	if json.Unmarshal(raw, &rep) != nil || rep.SandboxID == "" {
		return "", errcode.New(errcode.CallFailed, "sandbox::create replied %s: no sandbox_id", raw)
	}
	return rep.SandboxID, nil
}

// stopSandbox stops the sandbox a shell created (sandbox::stop), which ends its processes.
func stopSandbox(w *protocol.Worker, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := w.Call(ctx, "sandbox::stop", map[string]string{"sandbox_id": id}); err != nil {
		return callErr("sandbox::stop", err)
	}
	return nil
}
