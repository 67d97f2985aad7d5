// Package wmain is the start-up shared by the product workers' commands: flags, configuration,
// signals, the engine connection and the exit status.
package wmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/wconfig"
)

// Main is one worker command: name (http, cron, queue, state), its configuration with defaults
// in cfg, and setup, which registers the worker's functions and trigger types on w (before it
// connects) and returns a function that releases what it holds.
type Main struct {
	Name    string
	Version string
	Config  any
	Setup   func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (cleanup func(), err error)
}

// Run parses the command line, runs the worker until SIGINT or SIGTERM, and exits. lookupEnv
// is the command's environment (os.LookupEnv): $III_CONFIG, the configuration's ${VAR} and
// $III_WORKER_NAME.
func (m Main) Run(lookupEnv func(string) (string, bool)) {
	fs := flag.NewFlagSet(m.Name, flag.ContinueOnError)
	cfgPath := fs.String("config", "", "configuration file (YAML or JSON; default $III_CONFIG)")
	check := fs.Bool("check", false, "read the configuration, print it as understood and exit")
	version := fs.Bool("version", false, "print the version and exit")
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *version {
		fmt.Println(m.Version)
		return
	}
	if _, err := wconfig.Load(*cfgPath, m.Config, lookupEnv); err != nil {
		fail(errcode.ConfigInvalid, err)
	}
	if *check {
		fmt.Printf("%+v\n", m.Config)
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", m.Name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	name, _ := lookupEnv(protocol.EnvWorkerName)
	if name == "" {
		name = m.Name
	}
	w := protocol.NewWorker(protocol.Config{Name: name, Version: m.Version, Description: "iii " + m.Name + " worker",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.FromEnv(func(k string) string { v, _ := lookupEnv(k); return v }))
	cleanup, err := m.Setup(ctx, w, log)
	if err != nil {
		fail(errcode.StartFailed, err)
	}
	defer cleanup()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = w.Start(sctx)
	cancel()
	if err != nil {
		fail(errcode.EngineUnreachable, err)
	}
	log.Info("registered", "namespace", w.Namespace(), "url", w.URL())
	select {
	case <-ctx.Done():
	case <-w.Done():
		if err := w.Err(); err != nil {
			cleanup()
			fail(errcode.RegistrationRefused, err)
		}
	}
	_ = w.Close()
}

// fail prints err as error[CODE]: message (the engine's code for an engine error, else code)
// and exits 1.
func fail(code string, err error) {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		err = errcode.New(pe.Code, "%s", pe.Message)
	}
	os.Exit(errcode.Exit(os.Stderr, err, code))
}
