// Command stream is the iii stream worker (package "stream" in the worker registry), as iii's
// iii-stream: stream::* functions, the "stream", "stream:join" and "stream:leave" trigger types and
// the stream WebSocket endpoint,
// on NATS JetStream (see package stream).
//
// Configuration (YAML, --config or $III_CONFIG), iii's keys and the store's:
//
//	host: 127.0.0.1 # the WebSocket endpoint (iii's default is 0.0.0.0)
//	port: 3112
//	auth_function: my::auth # optional: called with {headers, path, query_params, addr} per connection
//	adapter:        # optional: {name: kv, config: {store_method: file_based|in_memory, file_path: DIR}}
//	nats:           # see package jsstore: url, data_dir, listen, allow_remote, sync, creds_file
//	replicas: 1     # replicas of the bucket on a NATS cluster
//	allowed_origins: ["https://app.example"] # browser pages admitted besides the port's own and loopback ones ("*": all)
//	join_timeout_ms: 30000           # a socket that has not joined a stream by then is closed
//	idle_timeout_ms: 300000          # a socket left without a subscription this long is closed
//	max_connections: 1024            # sockets held in all (503 STREAM_CONNECTION_LIMIT past it)
//	max_connections_per_address: 256 # sockets one client IP address holds
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/stream"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

func main() {
	cfg := stream.Default()
	wmain.Main{Name: "stream", Version: version, Config: &cfg, Setup: func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (func(), error) {
		cfg.LookupEnv = os.LookupEnv
		return stream.Setup(ctx, cfg, w, log)
	}}.Run(os.LookupEnv)
}
