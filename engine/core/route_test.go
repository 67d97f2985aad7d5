package core

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

// TestRoutedBuiltin: a routed built-in's call reaches the function its Route names with the
// payload bytes as sent and the Route's rewrite of the reply; a call the Route declines, or one
// whose target another connection serves, goes to the built-in. A gated session may call it
// only when its gate lets it call the built-in's id, whatever the target (the engine's own call):
// an outsider the gate does not admit to it is refused FORBIDDEN before any routing.
func TestRoutedBuiltin(t *testing.T) {
	public := Listener{Name: "public", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{
		AuthFunctionID: "auth::check", Expose: []rbac.Filter{{Match: "routed::open"}}}}
	e, urls := serveListeners(t, public)
	var declined, served atomic.Int64
	var workerID atomic.Value // the worker the Route names
	workerID.Store("")
	route := func(json.RawMessage) (Route, bool) {
		if declined.Load() > 0 {
			return Route{}, false
		}
		return Route{Namespace: "boxes", FunctionID: "target::fn", WorkerID: workerID.Load().(string),
			Result: func(res json.RawMessage) json.RawMessage { return append(append(json.RawMessage("["), res...), ']') }}, true
	}
	builtin := func(context.Context, Caller, json.RawMessage) (any, error) {
		served.Add(1)
		return "built-in", nil
	}
	e.HandleRouted("routed::open", "test", builtin, route)
	e.HandleRouted("routed::closed", "test", builtin, route)

	target := protocol.NewWorker(protocol.Config{URL: urls[0], Namespace: "boxes", Name: "target", NoReconnect: true})
	_ = target.Register("target::fn", func(_ context.Context, in json.RawMessage) (any, error) { return in, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := target.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	main := client(t, urls[0], "", map[string]protocol.Handler{
		"auth::check": func(context.Context, json.RawMessage) (any, error) { return map[string]any{}, nil },
	})
	id, ok := e.Lookup("boxes", "target::fn")
	if !ok {
		t.Fatal("target::fn not registered")
	}
	workerID.Store(id)

	payload := json.RawMessage(`{"b":1,  "a":"x<y>"}`)
	out, err := main.Call(ctx, "routed::open", payload)
	if err != nil || string(out) != `[{"b":1,  "a":"x<y>"}]` {
		t.Errorf("routed call: %s, %v; want the target's reply to the bytes sent, rewritten", out, err)
	}
	if served.Load() != 0 {
		t.Error("the built-in served a call its Route sent on")
	}

	pub := client(t, urls[1], "any", nil)
	if out, err := pub.Call(ctx, "routed::open", payload); err != nil || string(out) != `[{"b":1,  "a":"x<y>"}]` {
		t.Errorf("routed::open from the gated session: %s, %v", out, err)
	}
	if _, err := pub.Call(ctx, "routed::closed", payload); code(err) != errcode.Forbidden {
		t.Errorf("routed::closed from the gated session: %v, want FORBIDDEN", err)
	}
	if _, err := pub.Call(ctx, "target::fn", payload, protocol.InNamespace("boxes")); code(err) != errcode.Forbidden {
		t.Errorf("target::fn from the gated session: %v, want FORBIDDEN", err)
	}

	workerID.Store("another")
	if out, err := main.Call(ctx, "routed::open", payload); err != nil || string(out) != `"built-in"` {
		t.Errorf("target served by another connection than the Route's: %s, %v; want the built-in's answer", out, err)
	}
	declined.Add(1)
	if out, err := main.Call(ctx, "routed::open", payload); err != nil || string(out) != `"built-in"` {
		t.Errorf("declined route: %s, %v; want the built-in's answer", out, err)
	}
}

// TestRoutedBuiltinFiresBothObservers: a routed call fires the observers of the built-in's id
// with the caller's view (the outcome the caller got) and those of the target function with
// the target's own outcome, as the built-in's call and its call of the target did.
func TestRoutedBuiltinFiresBothObservers(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	enginetest.Worker(t, url, "boxes", map[string]protocol.Handler{
		"target::fn": func(_ context.Context, in json.RawMessage) (any, error) { return in, nil },
	})
	id, ok := e.Lookup("boxes", "target::fn")
	if !ok {
		t.Fatal("target::fn not registered")
	}
	e.HandleRouted("routed::fn", "test", func(context.Context, Caller, json.RawMessage) (any, error) { return "built-in", nil },
		func(json.RawMessage) (Route, bool) {
			return Route{Namespace: "boxes", FunctionID: "target::fn", WorkerID: id,
				Result: func(res json.RawMessage) json.RawMessage { return append(append(json.RawMessage("["), res...), ']') }}, true
		})
	outer, inner := seen(make(chan json.RawMessage, 4)), seen(make(chan json.RawMessage, 4))
	addObserver(t, enginetest.Worker(t, url, "default", map[string]protocol.Handler{"alerts::outer": outer.handler}),
		`{"source": {"function_id": "routed::fn"}, "target": "alerts::outer"}`)
	addObserver(t, enginetest.Worker(t, url, "boxes", map[string]protocol.Handler{"alerts::inner": inner.handler}),
		`{"source": {"function_id": "target::fn"}, "target": "alerts::inner"}`)

	out, err := enginetest.Worker(t, url, "default", nil).Call(context.Background(), "routed::fn", json.RawMessage(`{"n":1}`))
	if err != nil || string(out) != `[{"n":1}]` {
		t.Fatalf("routed call: %s, %v", out, err)
	}
	var o, i struct {
		FunctionID string          `json:"function_id"`
		Output     json.RawMessage `json:"output"`
		Caller     struct {
			WorkerID string `json:"worker_id"`
		} `json:"caller"`
	}
	_ = json.Unmarshal(outer.next(t), &o)
	_ = json.Unmarshal(inner.next(t), &i)
	if o.FunctionID != "routed::fn" || string(o.Output) != `[{"n":1}]` || o.Caller.WorkerID == "engine" {
		t.Errorf("the built-in's observer saw %+v, want routed::fn's output as its caller got it", o)
	}
	if i.FunctionID != "target::fn" || string(i.Output) != `{"n":1}` || i.Caller.WorkerID != "engine" {
		t.Errorf("the target's observer saw %+v, want target::fn's own output, called by the engine", i)
	}
}
