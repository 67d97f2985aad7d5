package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/daemon"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/supervisor"
	"github.com/iii-go/iii/engine/protocol"
	engineerr "github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/tokens"
)

const logsUsage = `Usage:
  iii compose logs [WORKER] [--engine URL] [-n NS] [-f FILE] [--tail N] [-F|--follow] [--stream stdout|stderr]

Print the workers' logs through the running Compose daemon (compose::logs), each line prefixed
with its worker's name, like docker compose logs.

  WORKER             one container (default: every container of the project)
  --tail N           the last N lines of each worker (default 100, at most 1000)
  -F, --follow       keep printing what the workers write; Ctrl-C ends it, and so does Compose
                     stopping
  --stream S         only stdout or only stderr
  --engine URL       the engine the daemon is attached to (default: the file's engine.url,
                     else $III_URL, else ws://127.0.0.1:49134)
  -n, --namespace NS the daemon's namespace (default: the file's, else default)
  -f, --file FILE    the compose file (default ./worker-compose.yaml); sent as the file= guard
                     when given
`

type logsOptions struct {
	worker, engine, namespace, file, stream string
	fileSet, follow, help                   bool
	tail                                    *int
}

func parseLogs(args []string) (logsOptions, error) {
	o := logsOptions{file: DefaultFile}
	err := scanArgs(args, "iii compose logs", func(name, word string, value func() (string, error)) error {
		var err error
		switch name {
		case "-h", "--help", "help":
			o.help = true
		case "-F", "--follow":
			o.follow = true
		case "--tail":
			var v string
			if v, err = value(); err == nil {
				n, perr := strconv.Atoi(v)
				if perr != nil || n < 0 || n > daemon.LogsMaxTail {
					return errcode.Usagef(errcode.UsageError, "--tail %s: write a number from 0 to %d", v, daemon.LogsMaxTail)
				}
				o.tail = &n
			}
		case "--stream":
			if o.stream, err = value(); err == nil && o.stream != supervisor.StreamStdout && o.stream != supervisor.StreamStderr {
				return errcode.Usagef(errcode.UsageError, "--stream %s: write --stream stdout or --stream stderr", o.stream)
			}
		case "-f", "--file":
			o.file, err = value()
			o.fileSet = true
		case "-n", "--namespace":
			o.namespace, err = value()
		case "--engine":
			o.engine, err = value()
		default:
			if strings.HasPrefix(word, "-") || o.worker != "" {
				return errcode.Usagef(errcode.UsageError, "unknown argument %q; run 'iii compose logs --help'", word)
			}
			o.worker = word
		}
		return err
	})
	if err != nil {
		return o, err
	}
	if o.namespace != "" && !composefile.ValidNamespace(o.namespace) {
		return o, errcode.Usagef(errcode.InvalidNamespace, "--namespace %q is not a namespace: use lowercase letters, digits, _ and -", o.namespace)
	}
	return o, nil
}

// target returns the engine URL and namespace a logs client talks to.
func (o logsOptions) target(lookupEnv func(string) (string, bool)) (string, string, error) {
	url, ns := o.engine, o.namespace
	f, err := composefile.Load(o.file, lookupEnv)
	if err != nil && o.fileSet {
		return "", "", err
	}
	if f != nil {
		if ns == "" {
			ns = f.Namespace
		}
		if url == "" && f.Engine != nil {
			url = f.Engine.URL
		}
	}
	if url == "" {
		url = getenv(lookupEnv)(protocol.EnvURL)
	}
	if url == "" {
		url = protocol.DefaultURL
	}
	if ns == "" {
		ns = composefile.DefaultNamespace
	}
	return url, ns, nil
}

// runLogs is `iii compose logs`.
func runLogs(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	o, err := parseLogs(args)
	if err != nil {
		return errcode.Exit(stderr, err)
	}
	if o.help {
		fmt.Fprint(stdout, logsUsage)
		return 0
	}
	url, ns, err := o.target(lookupEnv)
	if err != nil {
		return errcode.Exit(stderr, err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	w, err := protocol.Connect(cctx, protocol.Config{URL: url, Name: "iii-cli:compose-logs", Namespace: protocol.DefaultNamespace, NoReconnect: true,
		Token: tokens.ForCLI(url, ns, getenv(lookupEnv), stderr)}.FromEnv(getenv(lookupEnv)))
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		return errcode.Exit(stderr, errcode.New(errcode.EngineCallFailed, "no engine answered at %s (%w); is Compose running? (iii compose --up)", url, err))
	}
	defer w.Close()
	req := o.request()
	call := func(req map[string]any, wait time.Duration) (daemon.LogsReply, error) {
		var reply daemon.LogsReply
		raw, err := w.Call(ctx, daemon.FnLogs, req, protocol.InNamespace(ns), protocol.WithTimeout(wait+10*time.Second))
		if err != nil {
			return reply, err
		}
		return reply, json.Unmarshal(raw, &reply)
	}
	p := &logPrinter{out: stdout}
	reply, err := call(req, 0)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		return errcode.Exit(stderr, callError(err, ns))
	}
	p.print(reply)
	if !o.follow {
		return 0
	}
	return followLogs(ctx, call, p, req, reply, ns, stderr)
}

// request is the compose::logs request of o's first call.
func (o logsOptions) request() map[string]any {
	req := map[string]any{}
	if o.worker != "" {
		req["container"] = o.worker
	}
	if o.stream != "" {
		req["stream"] = o.stream
	}
	if o.fileSet {
		req["file"] = o.file
	}
	if o.tail != nil {
		req["tail"] = *o.tail
	}
	return req
}

// followLogs asks, from the cursors of reply on, for what the workers log next (each call
// waiting up to daemon.LogsMaxWait) and prints it, until ctx ends or Compose stops.
func followLogs(ctx context.Context, call func(map[string]any, time.Duration) (daemon.LogsReply, error), p *logPrinter,
	req map[string]any, reply daemon.LogsReply, ns string, stderr io.Writer) int {
	var err error
	delete(req, "tail")
	req["wait_ms"] = daemon.LogsMaxWait.Milliseconds()
	for {
		cursors := map[string]supervisor.Cursor{}
		for _, lw := range reply.Workers {
			cursors[lw.Container] = lw.Cursor
		}
		req["cursors"] = cursors
		if reply, err = call(req, daemon.LogsMaxWait); err != nil {
			if ctx.Err() != nil {
				return 0
			}
			if composeGone(err) {
				fmt.Fprintf(stderr, "compose in namespace %s stopped\n", ns)
				return 0
			}
			return errcode.Exit(stderr, callError(err, ns))
		}
		p.print(reply)
	}
}

// composeGone reports whether a call failed because the daemon, or its engine, went away.
func composeGone(err error) bool {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Code {
	case engineerr.FunctionNotFound, engineerr.NotConnected, engineerr.InvocationStopped:
		return true
	}
	return false
}

// callError turns a failed compose::logs call into the error the CLI prints.
func callError(err error, ns string) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		if pe.Code == engineerr.FunctionNotFound {
			return errcode.New(errcode.EngineCallFailed, "no Compose daemon serves namespace '%s' on this engine (start one with iii compose --up, or name its namespace with -n)", ns)
		}
		return errcode.New(pe.Code, "%s", pe.Message)
	}
	return errcode.New(errcode.EngineCallFailed, "compose::logs: %w", err)
}

// logPrinter prints entries as "worker | line", names padded to the widest seen so far.
type logPrinter struct {
	out   io.Writer
	width int
}

func (p *logPrinter) print(r daemon.LogsReply) {
	for _, w := range r.Workers {
		p.width = max(p.width, len(w.Container))
	}
	for _, w := range r.Workers {
		for _, e := range w.Entries {
			fmt.Fprintf(p.out, "%-*s | %s\n", p.width, w.Container, e.Message)
		}
	}
}
