package sandboxcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// processExited is the S-code of a signal that found the process already exited: its exit
// message is on its way.
const processExited = "S233"

func runExec(args []string, getenv func(string) string, stdio IO) int {
	f, err := parse("exec", args)
	if err != nil {
		return errcode.Exit(stdio.Stderr, errcode.Usagef(errcode.Usage, "%w", err), errcode.Usage)
	}
	if f.help {
		fmt.Fprint(stdio.Stdout, execUsage)
		return 0
	}
	w, err := connect(f, getenv, "iii-cli:sandbox-exec")
	if err != nil {
		return errcode.Exit(stdio.Stderr, err, errcode.EngineUnreachable)
	}
	defer w.Close()
	code, err := execute(w, f, stdio)
	if err != nil {
		return errcode.Exit(stdio.Stderr, err, errcode.CallFailed)
	}
	return code
}

// execute streams the command's output until its exit message, forwarding the first of each
// quitting signal to it.
func execute(w *protocol.Worker, f *flags, stdio IO) (int, error) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, quitSignals...)
	defer signal.Stop(sigs)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	p, err := w.StartProcess(ctx, protocol.ProcessRequest{SandboxID: f.sandboxID, Argv: f.argv, Env: f.env,
		Workdir: f.workdir, TimeoutMS: f.timeoutMS, Stdin: f.stdin})
	cancel()
	if err != nil {
		return 0, callErr(protocol.FnSandboxProcessStart, err)
	}
	defer p.Detach()
	if p.Stdin != nil {
		go func() {
			_, _ = io.Copy(p.Stdin, stdio.Stdin)
			_ = p.Stdin.Close()
		}()
	}
	errDone := make(chan error, 1)
	go func() {
		if p.Stderr == nil {
			errDone <- nil
			return
		}
		_, err := io.Copy(stdio.Stderr, p.Stderr)
		errDone <- err
	}()
	outDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(stdio.Stdout, p.Stdout)
		outDone <- err
	}()
	sent := map[os.Signal]bool{}
	for {
		select {
		case sig := <-sigs:
			name := "SIG" + map[os.Signal]string{syscall.SIGHUP: "HUP", syscall.SIGTERM: "TERM", syscall.SIGINT: "INT"}[sig]
			if sent[sig] {
				fmt.Fprintf(stdio.Stderr, "iii: left process %s running in sandbox %s\n", p.ID, f.sandboxID)
				return 128 + int(sig.(syscall.Signal)), nil
			}
			sent[sig] = true
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := p.Signal(ctx, name)
			cancel()
			var perr *protocol.Error
			if err != nil && !(errors.As(err, &perr) && perr.Code == processExited) {
				return 0, callErr(protocol.FnSandboxProcessSignal, err)
			}
		case err := <-outDone:
			<-errDone
			if e := p.Exited(); e != nil {
				return e.Code(), nil
			}
			if err == nil {
				err = fmt.Errorf("the stream ended without the exit: another attach took the process over")
			}
			return 0, errcode.New(errcode.CallFailed, "process %s in sandbox %s: %w; it may still run (sandbox::process::list)", p.ID, f.sandboxID, err)
		}
	}
}
