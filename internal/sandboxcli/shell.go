package sandboxcli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// loginShell runs bash as a login shell when the image has it, else sh: one start, without a
// round trip to look first.
var loginShell = []string{"sh", "-c", `if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l`}

// defaultTerm is TERM in the sandbox when the local terminal names none.
const defaultTerm = "xterm-256color"

// quitSignals end a shell session from outside: the terminal hanging up, a kill, an interrupt
// that did not come through the terminal (raw mode sends Ctrl-C to the sandbox as a byte).
var quitSignals = []os.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT}

func runShell(args []string, getenv func(string) string, stdio IO) int {
	f, err := parse("shell", args)
	if err != nil {
		return errcode.Exit(stdio.Stderr, errcode.Usagef(errcode.Usage, "%w", err), errcode.Usage)
	}
	if f.help {
		fmt.Fprint(stdio.Stdout, shellUsage)
		return 0
	}
	in := int(stdio.Stdin.Fd())
	if !term.IsTerminal(in) {
		return errcode.Exit(stdio.Stderr, errcode.Usagef(errcode.Usage,
			"`iii sandbox shell` needs a terminal on stdin; to run a command without one use `iii sandbox exec SANDBOX_ID -- CMD`"), errcode.Usage)
	}
	w, err := connect(f, getenv, "iii-cli:sandbox-shell")
	if err != nil {
		return errcode.Exit(stdio.Stderr, err, errcode.EngineUnreachable)
	}
	defer w.Close()
	if f.image != "" {
		if f.sandboxID, err = createSandbox(w, f.image); err != nil {
			return errcode.Exit(stdio.Stderr, err, errcode.CallFailed)
		}
		if f.keep {
			fmt.Fprintf(stdio.Stderr, "iii: sandbox %s (image %s) created; it keeps running after this shell (stop it with `iii call sandbox::stop sandbox_id=%s`)\n", f.sandboxID, f.image, f.sandboxID)
		} else {
			fmt.Fprintf(stdio.Stderr, "iii: sandbox %s (image %s) created; it stops when this shell ends\n", f.sandboxID, f.image)
			defer func() {
				if err := stopSandbox(w, f.sandboxID); err != nil {
					errcode.Exit(stdio.Stderr, err, errcode.CallFailed)
				}
			}()
		}
	}
	code, err := shell(w, f, getenv, stdio)
	if err != nil {
		return errcode.Exit(stdio.Stderr, err, errcode.CallFailed)
	}
	return code
}

// shell runs the session: the local terminal raw for as long as it lasts, and restored on every
// way out of it (the shell's exit, a signal to iii, the engine going away, a failed start).
func shell(w *protocol.Worker, f *flags, getenv func(string) string, stdio IO) (int, error) {
	in := int(stdio.Stdin.Fd())
	size := terminalSize(stdio)
	env := map[string]string{"TERM": cmp.Or(getenv("TERM"), defaultTerm)}
	for k, v := range f.env {
		env[k] = v
	}
	// Signals are caught before the terminal goes raw, so none of them can end iii with the
	// terminal left raw.
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, quitSignals...)
	defer signal.Stop(quit)
	winch := make(chan os.Signal, 1)
	notifyResize(winch)
	defer signal.Stop(winch)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	p, err := w.StartProcess(ctx, protocol.ProcessRequest{SandboxID: f.sandboxID, Argv: loginShell, Env: env, Workdir: f.workdir, TTY: &size})
	cancel()
	if err != nil {
		return 0, callErr(protocol.FnSandboxProcessStart, err)
	}
	defer p.Detach()

	state, err := term.MakeRaw(in)
	if err != nil {
		_ = p.Signal(context.Background(), "SIGHUP")
		return 0, errcode.New(errcode.Unsupported, "putting the terminal on stdin in raw mode: %w", err)
	}
	defer term.Restore(in, state)

	go func() {
		// Ends with iii: a read of the terminal cannot be interrupted portably.
		_, _ = io.Copy(p.Stdin, stdio.Stdin)
		_ = p.Stdin.Close()
	}()
	outDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(stdio.Stdout, p.Stdout)
		outDone <- err
	}()
	for {
		select {
		case <-winch:
			s := terminalSize(stdio)
			_ = p.Resize(context.Background(), s.Rows, s.Cols)
		case sig := <-quit:
			// The session ends here, as an ssh client's does; the shell gets the hangup.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = p.Signal(ctx, "SIGHUP")
			cancel()
			return 128 + int(sig.(syscall.Signal)), nil
		case err := <-outDone:
			if e := p.Exited(); e != nil {
				return e.Code(), nil
			}
			if err == nil {
				err = errors.New("the stream ended without the exit: another attach took the process over")
			}
			fmt.Fprint(stdio.Stdout, "\r\n") // the error line starts on a line of its own
			return 0, errcode.New(errcode.CallFailed, "shell %s in sandbox %s: %w; it may still run (sandbox::process::list)", p.ID, f.sandboxID, err)
		}
	}
}

// terminalSize is the local terminal's size, else 24x80.
func terminalSize(stdio IO) protocol.TerminalSize {
	files := []*os.File{stdio.Stdin}
	if out, ok := stdio.Stdout.(*os.File); ok {
		files = append(files, out)
	}
	for _, f := range files {
		if c, r, err := term.GetSize(int(f.Fd())); err == nil && r > 0 && c > 0 {
			return protocol.TerminalSize{Rows: min(r, 1000), Cols: min(c, 1000)}
		}
	}
	return protocol.TerminalSize{Rows: 24, Cols: 80}
}
