// Command pubsub is the iii pubsub worker (package "pubsub" in the worker registry), as iii's
// iii-pubsub: the function publish {topic, data} and the trigger type subscribe {topic} on core
// NATS subjects, at most once (see package pubsub).
//
// Configuration (YAML, --config or $III_CONFIG):
//
//	adapter: {name: local} # iii's: in-process delivery, what this worker does (redis: CONFIG_UNSUPPORTED)
//	nats: # see package jsstore: url, data_dir, listen, allow_remote, sync, creds_file
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
	"github.com/iii-go/iii/workers/pubsub"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

// adapters is what the pubsub worker makes of iii's pubsub adapters: local is its own delivery.
var adapters = jsstore.AdapterRule{Worker: "pubsub", Local: []string{"local"}, Refused: []string{"redis"}}

type config struct {
	Adapter *jsstore.Adapter `yaml:"adapter"`
	NATS    jsstore.Config   `yaml:"nats"`
}

// callTimeout bounds one delivery.
const callTimeout = 30 * time.Second

func main() {
	cfg := &config{}
	wmain.Main{Name: "pubsub", Version: version, Config: cfg, Setup: func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (func(), error) {
		if _, err := adapters.Resolve(cfg.Adapter, cfg.NATS, os.LookupEnv); err != nil {
			return nil, err
		}
		dir, err := jsstore.DefaultDataDir("pubsub", w.Namespace())
		if err != nil {
			return nil, err
		}
		st, err := jsstore.Open(ctx, cfg.NATS, dir, "iii-pubsub")
		if err != nil {
			return nil, err
		}
		fire := func(t protocol.Trigger, data json.RawMessage) {
			fctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			if err := w.CallVoid(fctx, t.FunctionID, data, t.CallOptions()...); err != nil && ctx.Err() == nil {
				log.Warn("delivering a published message", "trigger_id", t.ID, "function_id", t.FunctionID, "err", err)
			}
		}
		svc := pubsub.New(st.NC, w.Namespace(), fire)
		cleanup := func() { svc.Close(); st.Close() }
		if err := w.Register(pubsub.FunctionPublish, svc.Publish); err != nil {
			cleanup()
			return nil, err
		}
		if err := w.RegisterTriggerType(pubsub.TriggerType, "Delivers each message published to a topic to every subscriber, at most once: {topic}", svc); err != nil {
			cleanup()
			return nil, err
		}
		return cleanup, nil
	}}.Run(os.LookupEnv)
}
