// Command bridge is the bridge worker (package "bridge" in the worker registry), iii's
// iii-bridge: it joins the engine it runs on to a remote engine (see package bridge).
//
// Configuration (YAML, --config or $III_CONFIG), iii's keys and two of this project's:
//
//	url: ws://10.0.0.2:49134   # the remote engine (required)
//	service_id: bridge-client  # the worker name on the remote engine (service_name, default this)
//	token_file: /path/to/remote-token # the remote engine's token (mode 0600); none: no token
//	namespace: default         # where exposed functions register on the remote engine
//	expose:                    # local functions the remote engine may call
//	  - {local_function: orders::create, remote_function: shop::orders::create}
//	forward:                   # local names for remote functions
//	  - {local_function: remote::state::get, remote_function: state::get, timeout_ms: 5000}
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/bridge"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

func main() {
	cfg := bridge.Default()
	wmain.Main{Name: "bridge", Version: version, Config: &cfg, Setup: func(ctx context.Context, local *protocol.Worker, log *slog.Logger) (func(), error) {
		if err := cfg.Check(); err != nil {
			return nil, err
		}
		// The local worker has read its token; the remote connection must never present it,
		// so nothing below may default to it.
		_ = os.Unsetenv(protocol.EnvTokenFile)
		_ = os.Unsetenv(protocol.EnvToken)
		remote := protocol.NewWorker(protocol.Config{URL: cfg.URL, Namespace: cfg.Namespace, Name: cfg.ServiceName,
			Description: "iii bridge " + cfg.ServiceID, Version: version, TokenFile: cfg.TokenFile})
		b, err := bridge.New(cfg, local, remote, log)
		if err != nil {
			return nil, err
		}
		b.Start(ctx)
		return b.Close, nil
	}}.Run(os.LookupEnv)
}
