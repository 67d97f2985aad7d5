// Command state is the iii state worker (package "state" in the worker registry): state::*
// functions and the "state" trigger type on NATS JetStream (see package state).
//
// Configuration (YAML, --config or $III_CONFIG):
//
//	adapter:    # iii's: {name: kv, config: {store_method: file_based|in_memory, file_path: DIR, save_interval_ms}}
//	            # (redis, bridge: CONFIG_UNSUPPORTED); see jsstore.AdapterRule
//	triggers_enabled: true # iii's; false (pausing every state trigger) is CONFIG_UNSUPPORTED
//	save_interval_ms: 5000 # iii's flush cadence, checked and without effect: each write is stored as it is acknowledged
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

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/condition"
	"github.com/iii-go/iii/workers/jsstore"
	"github.com/iii-go/iii/workers/state"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

// adapters is what the state worker makes of iii's state adapters.
var adapters = jsstore.AdapterRule{Worker: "state", Store: []string{"kv"}, Refused: []string{"redis", "bridge"}}

type config struct {
	Adapter  *jsstore.Adapter `yaml:"adapter"`
	NATS     jsstore.Config   `yaml:"nats"`
	Replicas int              `yaml:"replicas"`
	// MaxValueBytes bounds a written value (iii's max_value_bytes; unset or 0: no limit).
	MaxValueBytes int `yaml:"max_value_bytes"`
	// TriggersEnabled is iii's switch of state trigger delivery; only true is implemented.
	TriggersEnabled *bool `yaml:"triggers_enabled"`
	// SaveIntervalMS is iii's flush cadence of its file store (checked, see jsstore.Adapter).
	SaveIntervalMS *int `yaml:"save_interval_ms"`
}

func main() {
	cfg := &config{Replicas: 1}
	wmain.Main{Name: "state", Version: version, Config: cfg, Setup: func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (func(), error) {
		if cfg.MaxValueBytes < 0 {
			return nil, errcode.New(errcode.ConfigInvalid, "max_value_bytes is %d: it must be 0 (no limit) or more", cfg.MaxValueBytes)
		}
		if cfg.TriggersEnabled != nil && !*cfg.TriggersEnabled {
			return nil, errcode.New(errcode.ConfigUnsupported, "state worker: triggers_enabled false is not supported: state triggers always fire; unregister the triggers instead")
		}
		if cfg.SaveIntervalMS != nil && (*cfg.SaveIntervalMS < 100 || *cfg.SaveIntervalMS > 3_600_000) {
			return nil, errcode.New(errcode.ConfigInvalid, "state worker: save_interval_ms %d: it must be a number of milliseconds from 100 to 3600000", *cfg.SaveIntervalMS)
		}
		place, err := adapters.Resolve(cfg.Adapter, cfg.NATS, os.LookupEnv)
		if err != nil {
			return nil, err
		}
		dir, err := jsstore.DefaultDataDir("state", w.Namespace())
		if err != nil {
			return nil, err
		}
		st, err := jsstore.OpenPlaced(ctx, cfg.NATS, place, dir, "iii-state")
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
		svc.Call, svc.Log = condition.Through(w), log
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
