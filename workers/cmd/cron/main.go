// Command cron is the iii cron worker (package "cron" in the worker registry): the "cron"
// trigger type (see package cron), its tick locks on NATS JetStream.
//
// Configuration (YAML, --config or $III_CONFIG):
//
//	adapter: # iii's: {name: local} or {name: kv, config: {store_method, file_path, save_interval_ms}}, this
//	         # worker's scheduler with its tick locks in the store (redis: CONFIG_UNSUPPORTED)
//	nats:  # see package jsstore: url, data_dir, listen, allow_remote, sync, creds_file
package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/condition"
	"github.com/iii-go/iii/workers/cron"
	"github.com/iii-go/iii/workers/jsstore"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

// adapters is what the cron worker makes of iii's cron adapters: kv (iii's lock store) and the
// standalone worker's local both mean this worker's scheduler.
var adapters = jsstore.AdapterRule{Worker: "cron", Store: []string{"kv"}, Local: []string{"local"}, Refused: []string{"redis"}}

type config struct {
	Adapter *jsstore.Adapter `yaml:"adapter"`
	NATS    jsstore.Config   `yaml:"nats"`
}

func main() {
	cfg := &config{}
	wmain.Main{Name: "cron", Version: version, Config: cfg, Setup: func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (func(), error) {
		place, err := adapters.Resolve(cfg.Adapter, cfg.NATS, os.LookupEnv)
		if err != nil {
			return nil, err
		}
		dir, err := jsstore.DefaultDataDir("cron", w.Namespace())
		if err != nil {
			return nil, err
		}
		st, err := jsstore.OpenPlaced(ctx, cfg.NATS, place, dir, "iii-cron")
		if err != nil {
			return nil, err
		}
		fire := func(t protocol.Trigger, tick cron.Tick) {
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := w.CallVoid(fctx, t.FunctionID, tick, t.CallOptions()...); err != nil {
				log.Warn("delivering a cron tick", "trigger_id", t.ID, "function_id", t.FunctionID, "err", err)
			}
		}
		svc, err := cron.Open(ctx, st.JS, w.Namespace(), fire, log)
		if err != nil {
			st.Close()
			return nil, err
		}
		svc.Call = condition.Through(w)
		if err := w.RegisterTriggerType("cron", "Calls the function on a schedule: {expression, condition_function_id?}, the expression with seconds (6 or 7 fields)", svc); err != nil {
			st.Close()
			return nil, err
		}
		return st.Close, nil
	}}.Run(os.LookupEnv)
}
