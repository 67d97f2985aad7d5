// Package condition evaluates a trigger's condition_function_id as iii's workers do: the
// function is called, in the trigger's namespace, with the event the handler would get; an
// answer of false skips the handler and any other answer (null included) lets it run. The
// state, cron and queue workers share it, so the three read an answer the same way.
package condition

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

// Caller calls function fn in namespace ns ("" is the worker's) and returns its answer.
type Caller func(ctx context.Context, fn, ns string, payload any) (json.RawMessage, error)

// Timeout bounds a call of a condition function that has no deadline of its own.
const Timeout = 10 * time.Second

// Allows reports whether a condition function's answer lets the handler run.
func Allows(answer json.RawMessage) bool { return strings.TrimSpace(string(answer)) != "false" }

// Ask calls the condition function fn in ns with payload, within Timeout, and reports whether
// the handler may run; a failed call is the caller's to judge (state and cron skip the handler,
// the queue counts a failed attempt).
func Ask(ctx context.Context, call Caller, fn, ns string, payload any) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	res, err := call(ctx, fn, ns, payload)
	if err != nil {
		return false, err
	}
	return Allows(res), nil
}

// Through is the Caller of a worker connection: it calls in ns, or in the worker's own
// namespace when ns is "".
func Through(w *protocol.Worker) Caller {
	return func(ctx context.Context, fn, ns string, payload any) (json.RawMessage, error) {
		var opts []protocol.CallOption
		if ns != "" {
			opts = append(opts, protocol.InNamespace(ns))
		}
		return w.Call(ctx, fn, payload, opts...)
	}
}
