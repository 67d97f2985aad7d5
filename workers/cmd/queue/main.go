// Command queue is the iii queue worker (package "queue" in the worker registry): the engine's
// action enqueue (queue::enqueue), queue::publish, queue::dlq::list and the "queue" trigger
// type on NATS JetStream (see package queue), and iii's names for the topic side:
// iii::durable::publish (queue::publish) and the trigger type durable:subscriber, and iii's
// dead-letter functions iii::queue::{redrive, redrive_message, discard_message} and, in the
// default namespace, engine::queue::{list_topics, topic_stats, dlq_topics, dlq_messages}. Delivery is at least once; each delivery passes
// the message's id as message_id in the invocation metadata.
//
// Configuration (YAML, --config or $III_CONFIG):
//
//	adapter:          # iii's: {name: builtin, config: {store_method: file_based|in_memory, file_path: DIR, save_interval_ms}}
//	                  # (redis, rabbitmq, bridge: CONFIG_UNSUPPORTED); see jsstore.AdapterRule
//	nats:             # see package jsstore: url, data_dir, listen, allow_remote, sync, creds_file
//	defaults:         {max_retries: 3, backoff_ms: 1000, concurrency: 10, timeout_ms: 30000}
//	queues:           {<name>: {max_retries, backoff_ms, concurrency, timeout_ms}}
//	retention_hours:  168
//	replicas:         1
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
	"github.com/iii-go/iii/workers/queue"
	"github.com/iii-go/iii/workers/wmain"
)

var version = "0.0.0-dev"

// adapters is what the queue worker makes of iii's queue adapters.
var adapters = jsstore.AdapterRule{Worker: "queue", Store: []string{"builtin"}, Refused: []string{"redis", "rabbitmq", "bridge"}}

type config struct {
	Adapter      *jsstore.Adapter `yaml:"adapter"`
	NATS         jsstore.Config   `yaml:"nats"`
	queue.Config `yaml:",inline"`
}

func main() {
	cfg := &config{}
	wmain.Main{Name: "queue", Version: version, Config: cfg, Setup: func(ctx context.Context, w *protocol.Worker, log *slog.Logger) (func(), error) {
		place, err := adapters.Resolve(cfg.Adapter, cfg.NATS, os.LookupEnv)
		if err != nil {
			return nil, err
		}
		dir, err := jsstore.DefaultDataDir("queue", w.Namespace())
		if err != nil {
			return nil, err
		}
		st, err := jsstore.OpenPlaced(ctx, cfg.NATS, place, dir, "iii-queue")
		if err != nil {
			return nil, err
		}
		call := func(ctx context.Context, fn, ns string, data, meta json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
			opts := []protocol.CallOption{protocol.WithTimeout(timeout)}
			if ns != "" {
				opts = append(opts, protocol.InNamespace(ns))
			}
			if len(meta) > 0 {
				opts = append(opts, protocol.WithMetadata(meta))
			}
			return w.Call(ctx, fn, data, opts...)
		}
		svc, err := queue.Open(ctx, st.JS, w.Namespace(), cfg.Config, call, log)
		if err != nil {
			st.Close()
			return nil, err
		}
		cleanup := func() { svc.Close(); st.Close() }
		fns, skipped := svc.Functions(w.Namespace())
		if len(skipped) > 0 {
			log.Info("iii's engine::queue::* ids live in the default namespace; not registered here", "namespace", w.Namespace(), "ids", skipped)
		}
		for id, h := range fns {
			if err := w.Register(id, h); err != nil {
				cleanup()
				return nil, err
			}
		}
		if err := w.RegisterTriggerType("queue", "Delivers each message published to a topic: {topic, max_retries?, backoff_ms?, concurrency?, timeout_ms?, condition_function_id?}", svc); err != nil {
			cleanup()
			return nil, err
		}
		if err := w.RegisterTriggerType(queue.DurableSubscriber, "iii's name of the queue trigger: {topic, condition_function_id?, queue_config?: {type?, maxRetries?, concurrency?, backoffDelayMs?, visibilityTimeout?}}", svc.Durable()); err != nil {
			cleanup()
			return nil, err
		}
		return cleanup, nil
	}}.Run(os.LookupEnv)
}
