// Package enginestream serves iii-stream in the engine's process, as iii does when config.yaml
// declares it: the stream worker of workers/stream, connected to the engine's own listener as
// the worker "iii-stream" in the default namespace, with its WebSocket endpoint on iii-stream's
// host and port and its items in JetStream embedded in the engine's process
// (~/.iii/data/stream/default/, or the kv adapter's file_path).
package enginestream

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/cli"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/stream"
)

// StartTimeout bounds the worker's registration with the engine.
const StartTimeout = 30 * time.Second

// Config is the stream worker's configuration for config.yaml's iii-stream entry.
func Config(env cli.EngineWorkerEnv) stream.Config {
	sc := env.Config.Stream
	cfg := stream.Default()
	cfg.Host, cfg.Port, cfg.AuthFunction = sc.Host, stream.Port(sc.Port), sc.AuthFunction
	cfg.AllowedOrigins, cfg.JoinTimeoutMS, cfg.IdleTimeoutMS = sc.AllowedOrigins, sc.JoinTimeoutMS, sc.IdleTimeoutMS
	cfg.MaxConnections, cfg.MaxConnectionsPerAddress = sc.MaxConnections, sc.MaxConnectionsPerAddress
	cfg.Adapter = &stream.Adapter{Name: "kv", Config: map[string]any{}}
	cfg.LookupEnv = env.LookupEnv
	if sc.Memory {
		cfg.Adapter.Config["store_method"] = "in_memory"
	}
	if sc.FilePath != "" {
		cfg.Adapter.Config["file_path"] = sc.FilePath
	}
	return cfg
}

// Serve is the engine's cli.EngineWorker for iii-stream. It binds the endpoint and opens the
// store before returning (a port in use is LISTEN_FAILED, so the engine does not start); the
// registration runs in the background, within StartTimeout, once the engine serves.
func Serve(ctx context.Context, env cli.EngineWorkerEnv) (func(), error) {
	w := protocol.NewWorker(protocol.Config{URL: env.URL, Namespace: "default", Name: "iii-stream",
		Description: "iii-stream, served by the engine", Version: env.Version, TokenFile: env.TokenFile,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.FromEnv(getenv(env.LookupEnv)))
	cleanup, err := stream.Setup(ctx, Config(env), w, env.Log)
	if err != nil {
		return nil, err
	}
	started := make(chan struct{})
	go func() {
		defer close(started)
		sctx, cancel := context.WithTimeout(ctx, StartTimeout)
		defer cancel()
		if err := w.Start(sctx); err != nil && ctx.Err() == nil {
			env.Log.Error("iii-stream could not register with the engine; stream::* is not served", "err", err)
			return
		}
		if ctx.Err() == nil {
			env.Log.Info("iii-stream registered", "url", env.URL)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			<-started
			_ = w.Close()
			cleanup()
		})
	}, nil
}

// getenv is the variable lookup of lookupEnv, "" when unset; nil is an empty environment.
func getenv(lookupEnv func(string) (string, bool)) func(string) string {
	if lookupEnv == nil {
		return nil
	}
	return func(k string) string {
		v, _ := lookupEnv(k)
		return v
	}
}
