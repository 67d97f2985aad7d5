// Command state is the iii state worker (package "state" in the worker registry): state::*
// functions and the "state" trigger type on NATS JetStream (see package state).
//
// Configuration (YAML, --config or $III_CONFIG):
//
//	nats:       # see package jsstore: url, data_dir, listen, allow_remote, sync, creds_file
//	replicas: 1 # replicas of the bucket on a NATS cluster
//	max_value_bytes: 0 # refuse values over this many bytes of compact JSON (VALUE_TOO_LARGE); 0: no limit
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"time"

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
	"github.com/iii-go/iii/workers/state"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

type config struct {
	NATS     jsstore.Config `yaml:"nats"`
	Replicas int            `yaml:"replicas"`
	// MaxValueBytes bounds a written value (iii's max_value_bytes; unset or 0: no limit).
	MaxValueBytes int `yaml:"max_value_bytes"`
}

func main() {
	cfg := &config{Replicas: 1}
	wmain.Main{Name: "state", Version: version, Config: cfg, Setup: func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (func(), error) {
		if cfg.MaxValueBytes < 0 {
			return nil, errcode.New(errcode.ConfigInvalid, "max_value_bytes is %d: it must be 0 (no limit) or more", cfg.MaxValueBytes)
		}
		dir, err := jsstore.DefaultDataDir("state", w.Namespace())
		if err != nil {
			return nil, err
		}
		st, err := jsstore.Open(ctx, cfg.NATS, dir, "iii-state")
		if err != nil {
			return nil, err
		}
		fire := func(t protocol.Trigger, ev state.Event) {
			fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.CallVoid(fctx, t.FunctionID, ev, t.CallOptions()...); err != nil {
				log.Warn("delivering a state event", "trigger_id", t.ID, "function_id", t.FunctionID, "err", err)
			}
		}
		svc, err := state.Open(ctx, st.JS, w.Namespace(), cfg.Replicas, fire)
		if err != nil {
			st.Close()
			return nil, err
		}
		svc.MaxValueBytes = cfg.MaxValueBytes
		svc.Call, svc.Log = condCaller(w), log
		for id, h := range map[string]func(context.Context, json.RawMessage) (any, error){
			"state::set": svc.Set, "state::get": svc.Get, "state::delete": svc.Delete, "state::update": svc.Update,
			"state::list": svc.List, "state::list_groups": svc.ListGroups, "state::list_keys": svc.ListKeys,
			"state::compare-and-set": svc.CompareAndSet,
		} {
			if err := w.Register(id, h); err != nil {
				st.Close()
				return nil, err
			}
		}
		if err := w.RegisterTriggerType("state", "Fires on every committed state change: {scope?, key?, condition_function_id?}", svc); err != nil {
			st.Close()
			return nil, err
		}
		return st.Close, nil
	}}.Run(os.LookupEnv)
}

// condCaller calls a trigger's condition function in the trigger's namespace.
func condCaller(w *protocol.Worker) state.Caller {
	return func(ctx context.Context, fn, ns string, payload any) (json.RawMessage, error) {
		var opts []protocol.CallOption
		if ns != "" {
			opts = append(opts, protocol.InNamespace(ns))
		}
		return w.Call(ctx, fn, payload, opts...)
	}
}
