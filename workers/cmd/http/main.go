// Command http is the iii http worker (package "http" in the worker registry): the "http"
// trigger type served on one HTTP listener (see package httpworker), with iii's streamed
// request_body and response channels.
//
// Configuration (YAML, --config or $III_CONFIG):
//
//	host: 127.0.0.1                   # listen address (a non-loopback one must be set explicitly)
//	port: 3111
//	default_timeout: 30000            # ms a function may take before 504
//	max_body_bytes: 1048576           # larger bodies get 413 (streamed ones too, while they stream)
//	concurrency_request_limit: 1024   # more requests at once (bodies read) get 503
//	per_client_request_limit: 0       # slots one client address may hold; 0: a quarter of the above; more get 429
//	read_header_timeout: 10000        # ms to read a request's headers
//	body_read_timeout: 30000          # ms to read a request's body after its headers, else 408
//	idle_timeout: 120000              # ms a keep-alive connection may wait for its next request
//	cors: {allowed_origins: [], allowed_methods: [GET, POST, PUT, DELETE, PATCH, OPTIONS]}
//	middleware: []                    # global middleware: [{function_id, phase: preHandler, priority: 0}], lower priority first
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/httpworker"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

func main() {
	cfg := httpworker.Defaults()
	wmain.Main{Name: "http", Version: version, Config: &cfg, Setup: func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (func(), error) {
		if err := cfg.Validate(); err != nil {
			return nil, errcode.New(errcode.ConfigInvalid, "http worker configuration: %w", err)
		}
		call := func(ctx context.Context, t protocol.Trigger, fn string, payload any, timeout time.Duration) (json.RawMessage, error) {
			return w.Call(ctx, fn, payload, append(t.CallOptions(), protocol.WithTimeout(timeout))...)
		}
		srv := httpworker.New(cfg, call, log)
		pool := httpworker.NewChannelPool(w, 0, log)
		srv.SetChannels(pool)
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on %s (host, port): %w", addr, err)
		}
		hs := httpworker.HTTPServer(cfg, srv)
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("serving http", "err", err)
			}
		}()
		log.Info("http routes listening", "addr", ln.Addr().String())
		if err := w.RegisterTriggerType("http", "Serves an HTTP route: {api_path, http_method, condition_function_id?, middleware_function_ids?}", srv); err != nil {
			return nil, err
		}
		return func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
			if err := pool.Close(sctx); err != nil {
				log.Warn("removing the pooled stream channels", "err", err)
			}
		}, nil
	}}.Run(os.LookupEnv)
}
