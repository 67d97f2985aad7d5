package queue

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/triggerkeys"
)

// iii's names for the topic side of the queue, served by the same code as queue::publish and
// the "queue" trigger type.
const (
	// DurablePublish is iii's function id of queue::publish {topic, data}.
	DurablePublish = "iii::durable::publish"
	// DurableSubscriber is iii's trigger type of the "queue" subscriber.
	DurableSubscriber = "durable:subscriber"
)

// Durable is the provider of the durable:subscriber trigger type: a "queue" trigger under iii's
// name and config {topic, queue_config?: {type?, maxRetries?, concurrency?, backoffDelayMs?,
// backoffType?, visibilityTimeout?}} (this worker's max_retries, backoff_ms, concurrency and
// timeout_ms are accepted beside topic too), condition_function_id as the queue trigger takes
// it. type "fifo" delivers one message at a time; visibilityTimeout (ms) bounds each call as
// timeout_ms does. What this queue cannot honour (delaySeconds, maxPriority, a backoffType
// other than exponential) is refused, not ignored.
func (s *Service) Durable() protocol.TriggerHandler { return durable{s} }

type durable struct{ s *Service }

func (d durable) RegisterTrigger(ctx context.Context, t protocol.Trigger) error {
	cfg, err := durableConfig(t.Config)
	if err != nil {
		return err
	}
	t.Config = cfg
	return d.s.RegisterTrigger(ctx, t)
}

func (d durable) UnregisterTrigger(ctx context.Context, t protocol.Trigger) error {
	return d.s.UnregisterTrigger(ctx, t)
}

// durableConfig turns a durable:subscriber config into the "queue" trigger's.
func durableConfig(raw json.RawMessage) (json.RawMessage, error) {
	bad := func(format string, args ...any) error {
		return protocol.NewError(errcode.InvalidArguments, "durable:subscriber trigger config: "+format, args...)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return nil, bad("must be an object {topic, queue_config?}")
	}
	out := map[string]json.RawMessage{}
	for k, v := range top {
		switch k {
		case "topic", "queue", "max_retries", "backoff_ms", "concurrency", "timeout_ms", "condition_function_id":
			out[k] = v
		case "queue_config", "description":
		default:
			return nil, triggerkeys.Check(DurableSubscriber, raw, "topic", "queue_config", "queue", "max_retries", "backoff_ms", "concurrency", "timeout_ms", "condition_function_id")
		}
	}
	qc, ok := top["queue_config"]
	if !ok || bytes.Equal(bytes.TrimSpace(qc), []byte("null")) {
		return json.Marshal(out)
	}
	var q map[string]json.RawMessage
	if err := json.Unmarshal(qc, &q); err != nil || q == nil {
		return nil, bad("queue_config must be an object")
	}
	fifo := false
	for k, v := range q {
		var err error
		switch k {
		case "maxRetries":
			out["max_retries"], err = number(v)
		case "concurrency":
			out["concurrency"], err = number(v)
		case "backoffDelayMs":
			out["backoff_ms"], err = number(v)
		case "visibilityTimeout":
			out["timeout_ms"], err = number(v)
		case "type":
			var mode string
			_ = json.Unmarshal(v, &mode)
			switch mode {
			case "standard":
			case "fifo":
				fifo = true
			default:
				return nil, bad("queue_config.type %s: use standard or fifo", v)
			}
		case "backoffType":
			var bt string
			if json.Unmarshal(v, &bt) != nil || bt != "exponential" {
				return nil, bad("queue_config.backoffType %s: this queue backs off exponentially only", v)
			}
		case "delaySeconds", "maxPriority":
			return nil, bad("queue_config.%s is not supported by this queue worker", k)
		default:
			return nil, bad("unknown queue_config key %q", k)
		}
		if err != nil {
			return nil, bad("queue_config.%s must be a whole number, got %s", k, v)
		}
	}
	if fifo {
		if c, set := out["concurrency"]; set && string(c) != "1" {
			return nil, bad("queue_config.type fifo runs one message at a time: concurrency must be 1 or unset")
		}
		out["concurrency"] = json.RawMessage("1")
	}
	return json.Marshal(out)
}

// number checks that v is a non-negative whole number.
func number(v json.RawMessage) (json.RawMessage, error) {
	var n uint64
	if err := json.Unmarshal(v, &n); err != nil {
		return nil, err
	}
	return json.Marshal(n)
}
