// Command rbac-proxy is the rbac-proxy worker (package "rbac-proxy" in the worker registry), as
// iii's: an RBAC gate on its own WebSocket port in front of the engine's trusted listener, with
// the engine's own gate (see package rbacproxy). It serves rbac-proxy::status through its
// worker connection, which also calls the auth function, the hooks and the middleware, reads
// functions' metadata for metadata filters (engine::functions::info) and, when there are
// such filters, serves rbac-proxy::functions-changed, bound to engine::functions-available.
//
// Configuration (YAML, --config or $III_CONFIG), iii's keys:
//
//	host: 127.0.0.1       # the public port's address (iii's default is 0.0.0.0)
//	port: 49200
//	engine_url: ws://127.0.0.1:49134 # the trusted engine listener; default $III_URL
//	middleware_function_id: my::middleware # optional
//	handshake_timeout_ms: 10000 # the auth function's, the hooks' and the engine dial's deadline
//	rbac:                 # an engine listener's rbac: block: auth_function_id, expose_functions,
//	  auth_function_id: my::auth # on_function_registration_function_id, on_trigger_registration_function_id,
//	  expose_functions: [match("api::*")] # on_trigger_type_registration_function_id
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/rbacproxy"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

func main() {
	cfg := rbacproxy.Default()
	wmain.Main{Name: "rbac-proxy", Version: version, Config: &cfg, Setup: func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (func(), error) {
		if err := cfg.Check(os.Getenv(protocol.EnvURL)); err != nil {
			return nil, err
		}
		p := rbacproxy.New(cfg, w, version, log)
		if err := w.Register("rbac-proxy::status", func(context.Context, json.RawMessage) (any, error) { return p.Status(), nil },
			protocol.WithDescription("the rbac-proxy's address, engine (credentials redacted), whether an auth function gates it, its live connections and version")); err != nil {
			return nil, err
		}
		if err := p.Watch(w); err != nil {
			return nil, err
		}
		if err := p.Listen(); err != nil {
			return nil, err
		}
		return p.Close, nil
	}}.Run(os.LookupEnv)
}
