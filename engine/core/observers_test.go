package core

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/observe"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

// seen collects what an observer's target receives.
type seen chan json.RawMessage

func (s seen) handler(_ context.Context, in json.RawMessage) (any, error) {
	s <- append(json.RawMessage(nil), in...)
	return nil, nil
}

func (s seen) next(t *testing.T) json.RawMessage {
	t.Helper()
	select {
	case b := <-s:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("the observer's target was not called")
		return nil
	}
}

func (s seen) none(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case b := <-s:
		t.Fatalf("the target was called: %s", b)
	case <-time.After(within):
	}
}

func addObserver(t *testing.T, w *protocol.Worker, req string) map[string]any {
	t.Helper()
	out, err := w.Call(context.Background(), FnObserversAdd, json.RawMessage(req))
	if err != nil {
		t.Fatalf("%s: %v", req, err)
	}
	var res map[string]any
	_ = json.Unmarshal(out, &res)
	return res
}

// An observer runs its target after each successful call of the function it watches, with the
// call's input, output and caller; a failing call fires only an on: error observer; a void call
// fires none; the observer goes with its owner's connection.
func TestObserverRunsTargetAfterEachCall(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"orders::create": func(_ context.Context, in json.RawMessage) (any, error) {
			var p struct{ Total int }
			_ = json.Unmarshal(in, &p)
			if p.Total < 0 {
				return nil, errors.New("negative total")
			}
			return map[string]any{"order_id": "o-1", "total": p.Total}, nil
		},
	})
	ok, failed := seen(make(chan json.RawMessage, 8)), seen(make(chan json.RawMessage, 8))
	watcher := enginetest.Worker(t, url, "default", map[string]protocol.Handler{"alerts::big": ok.handler, "alerts::failed": failed.handler})
	res := addObserver(t, watcher, `{"source": {"function_id": "orders::create", "filters": {"input.total": {"$gte": 100}}}, "target": "alerts::big"}`)
	if res["status"] != "active" {
		t.Fatalf("add: %v", res)
	}
	addObserver(t, watcher, `{"source": {"function_id": "orders::create", "on": "error", "capture": ["input"]}, "target": "alerts::failed"}`)

	caller := enginetest.Worker(t, url, "default", nil)
	ctx := context.Background()
	if _, err := caller.Call(ctx, "orders::create", map[string]int{"total": 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := caller.Call(ctx, "orders::create", map[string]int{"total": 150}); err != nil {
		t.Fatal(err)
	}
	var env struct {
		ObserverID, FunctionID, Namespace string `json:"-"`
		Input                             struct{ Total int }
		Output                            struct {
			OrderID string `json:"order_id"`
		}
		Caller struct {
			WorkerName string `json:"worker_name"`
		}
	}
	got := ok.next(t)
	if err := json.Unmarshal(got, &env); err != nil || env.Input.Total != 150 || env.Output.OrderID != "o-1" || env.Caller.WorkerName != "t-default" {
		t.Fatalf("envelope %s", got)
	}
	ok.none(t, 100*time.Millisecond) // total 5 did not match the filter

	if _, err := caller.Call(ctx, "orders::create", map[string]int{"total": -1}); err == nil {
		t.Fatal("a negative total succeeded")
	}
	if got := failed.next(t); !strings.Contains(string(got), `"error":{"code":"invocation_failed"`) || !strings.Contains(string(got), `"input":{"total":-1}`) {
		t.Fatalf("on error: %s", got)
	}
	if err := caller.CallVoid(ctx, "orders::create", map[string]int{"total": 500}); err != nil {
		t.Fatal(err)
	}
	ok.none(t, 100*time.Millisecond)

	watcher.Close()
	enginetest.Eventually(t, "the observers to go with their owner's connection", 5*time.Second, func() bool {
		return len(e.observers.List()) == 0
	})
}

// An observer may watch only what its owner may call: a protected function of a namespace
// whose token the owner lacks is FORBIDDEN; a malformed request names its field.
func TestObserverRights(t *testing.T) {
	tokFile := writeToken(t, "token", "s3cret")
	url := enginetest.Start(t, New(Options{Namespaces: map[string]NamespacePolicy{"shop": {TokenFile: tokFile}}})).URL
	owner := protocol.NewWorker(protocol.Config{URL: url, Namespace: "shop", Name: "shop-owner", Token: "s3cret"})
	if err := owner.Register("shop::secret", func(context.Context, json.RawMessage) (any, error) { return "x", nil }, protocol.Protected()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := owner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	stranger := enginetest.Worker(t, url, "default", map[string]protocol.Handler{"spy::seen": seen(make(chan json.RawMessage, 1)).handler})
	_, err := stranger.Call(ctx, FnObserversAdd, json.RawMessage(`{"source": {"function_id": "shop::secret", "namespace": "shop"}, "target": "spy::seen"}`))
	if code(err) != errcode.Forbidden {
		t.Fatalf("observing a protected function: %v", err)
	}
	_, err = stranger.Call(ctx, FnObserversAdd, json.RawMessage(`{"source": {"function_id": "a::b", "filters": {"body": 1}}, "target": "spy::seen"}`))
	if code(err) != errcode.InvalidArguments || !strings.Contains(err.Error(), "source.filters") {
		t.Fatalf("bad filter: %v", err)
	}
	_, err = stranger.Call(ctx, FnObserversAdd, json.RawMessage(`{"source": {"function_id": "a::b"}, "target": "spy::seen", "extra": 1}`))
	if code(err) != errcode.InvalidArguments || !strings.Contains(err.Error(), "extra") {
		t.Fatalf("unknown field: %v", err)
	}
	res := addObserver(t, stranger, `{"source": {"function_id": "later::fn"}, "target": "spy::later"}`)
	if res["status"] != "pending" {
		t.Fatalf("an observer of an unregistered target: %v", res)
	}
	_, err = owner.Call(ctx, FnObserversRemove, map[string]any{"id": res["id"]})
	if code(err) != errcode.Forbidden {
		t.Fatalf("removing another connection's observer: %v", err)
	}
	out, err := stranger.Call(ctx, FnObserversRemove, map[string]any{"id": res["id"]})
	if err != nil || string(out) != `{"removed":true}` {
		t.Fatalf("remove: %s %v", out, err)
	}
}

// One connection holds at most observe.DefaultPerOwner observers: one more is OBSERVER_LIMIT,
// and another connection still adds its own.
func TestObserversBoundedPerConnection(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	w := enginetest.Worker(t, url, "default", map[string]protocol.Handler{"spy::seen": seen(make(chan json.RawMessage, 1)).handler})
	for range observe.DefaultPerOwner {
		addObserver(t, w, `{"source": {"function_id": "a::b"}, "target": "spy::seen"}`)
	}
	_, err := w.Call(context.Background(), FnObserversAdd, json.RawMessage(`{"source": {"function_id": "a::b"}, "target": "spy::seen"}`))
	if code(err) != errcode.ObserverLimit || !strings.Contains(err.Error(), "64 observers") {
		t.Fatalf("observer %d of one connection: %v", observe.DefaultPerOwner+1, err)
	}
	other := enginetest.Worker(t, url, "default", nil)
	addObserver(t, other, `{"source": {"function_id": "a::b"}, "target": "spy::seen"}`)
}

// A session of a gated listener observes only the calls it makes itself, and lists only its
// own observers; an ungated worker still observes every caller.
func TestGatedObserverSeesOnlyItsOwnCalls(t *testing.T) {
	open := Listener{Name: "open", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{
		Expose: []rbac.Filter{{Match: "api::*"}, {Match: "spy::*"}, {Match: "engine::observers::*"}}}}
	_, urls := serveListeners(t, open)
	client(t, urls[0], "", map[string]protocol.Handler{"api::login": echo("api::login")})
	mine, trusted := seen(make(chan json.RawMessage, 4)), seen(make(chan json.RawMessage, 4))
	session := client(t, urls[1], "", map[string]protocol.Handler{"spy::seen": mine.handler})
	watcher := client(t, urls[0], "", map[string]protocol.Handler{"audit::seen": trusted.handler})
	addObserver(t, session, `{"source": {"function_id": "api::login"}, "target": "spy::seen"}`)
	addObserver(t, watcher, `{"source": {"function_id": "api::login"}, "target": "audit::seen"}`)

	other := client(t, urls[0], "", nil)
	ctx := context.Background()
	if _, err := other.Call(ctx, "api::login", map[string]string{"password": "of-another-user"}); err != nil {
		t.Fatal(err)
	}
	if b := trusted.next(t); !strings.Contains(string(b), "of-another-user") {
		t.Fatalf("the ungated observer got %s", b)
	}
	if _, err := session.Call(ctx, "api::login", map[string]string{"password": "mine"}); err != nil {
		t.Fatal(err)
	}
	if b := mine.next(t); !strings.Contains(string(b), `"password":"mine"`) {
		t.Fatalf("the session's observer got %s", b)
	}
	trusted.next(t)
	mine.none(t, 200*time.Millisecond)

	out, err := session.Call(ctx, FnObserversList, nil)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Observers []observe.Row }
	_ = json.Unmarshal(out, &list)
	if len(list.Observers) != 1 || list.Observers[0].Target.FunctionID != "spy::seen" {
		t.Fatalf("the session lists %s", out)
	}
}
