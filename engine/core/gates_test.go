package core

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

// A trigger's provider calls its function, and the functions its config names, with the
// provider's rights: a session may bind only functions it may call or that it serves itself.
func TestRBACTriggerBindsOnlyCallableFunctions(t *testing.T) {
	l := Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{Expose: []rbac.Filter{{Match: "api::*"}}}}
	_, urls := serveListeners(t, l)
	fired := make(recordTriggers, 8)
	main := client(t, urls[0], "", map[string]protocol.Handler{"secret::page": echo("secret::page"), "api::cond": echo("api::cond")})
	if err := main.RegisterTriggerType("http", "", fired); err != nil {
		t.Fatal(err)
	}
	pub := client(t, urls[1], "", map[string]protocol.Handler{"pub::handler": echo("pub::handler")})
	hidden, _ := pub.RegisterTrigger("http", "secret::page", map[string]any{"api_path": "/leak"})
	cond, _ := pub.RegisterTrigger("http", "pub::handler", map[string]any{"api_path": "/c", "condition_function_id": "secret::page"})
	mw, _ := pub.RegisterTrigger("http", "pub::handler", map[string]any{"api_path": "/m", "middleware_function_ids": []string{"api::cond", "secret::page"}})
	ok, _ := pub.RegisterTrigger("http", "pub::handler", map[string]any{"api_path": "/ok", "condition_function_id": "api::cond"})
	exposed, _ := pub.RegisterTrigger("http", "api::cond", map[string]any{"api_path": "/api"})
	got := map[string]string{}
	for len(got) < 2 {
		select {
		case tr := <-fired:
			got[tr.ID] = tr.FunctionID
		case <-time.After(5 * time.Second):
			t.Fatalf("the admitted triggers never reached the provider: %v", got)
		}
	}
	if got[ok] != "pub::handler" || got[exposed] != "api::cond" {
		t.Errorf("the provider got %v, want %s and %s", got, ok, exposed)
	}
	for _, id := range []string{hidden, cond, mw} {
		var e *protocol.Error
		enginetest.Poll(5*time.Second, func() bool { e = pub.TriggerError(id); return e != nil })
		if e == nil || e.Code != errcode.Forbidden || !strings.Contains(e.Message, "secret::page") {
			t.Errorf("trigger %s: error %v, want FORBIDDEN naming secret::page", id, e)
		}
	}
	select {
	case tr := <-fired:
		t.Errorf("a refused trigger reached the provider: %+v", tr)
	default:
	}
}

// The functions a listener's gate calls (auth, hooks, middleware) are served only by
// connections without a session: a session may not register them, even while their trusted
// worker is away, and the trusted worker registers them again afterwards.
func TestGateFunctionsServedOnlyByTrusted(t *testing.T) {
	auth := func(context.Context, json.RawMessage) (any, error) {
		return map[string]any{"allow_function_registration": true}, nil
	}
	l := Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, Middleware: "my::mw",
		RBAC: &rbac.Config{AuthFunctionID: "my::auth", OnTriggerRegistration: "my::on-trig"}}
	other := Listener{Name: "open", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{}}
	_, urls := serveListeners(t, l, other)
	admin := client(t, urls[0], "", nil)
	trusted := client(t, urls[0], "", map[string]protocol.Handler{"my::auth": auth})
	pub := client(t, urls[1], "", nil)
	open := client(t, urls[2], "", nil)
	trusted.Close()
	waitListed(t, admin, "my::auth", false)
	squat := func(context.Context, json.RawMessage) (any, error) {
		return map[string]any{"allowed_functions": []string{"secret::fn"}}, nil
	}
	for _, w := range []*protocol.Worker{pub, open} {
		for _, id := range []string{"my::auth", "my::on-trig", "my::mw", "fine::fn"} {
			if err := w.Register(id, squat); err != nil {
				t.Fatal(err)
			}
		}
		// The engine applies a connection's frames in order: once a later call is answered
		// (FORBIDDEN or not), the registrations above were decided.
		_, _ = w.Call(context.Background(), "secret::fn", nil)
	}
	ids := listed(t, admin)
	for _, id := range []string{"my::auth", "my::on-trig", "my::mw"} {
		if _, ok := ids[id]; ok {
			t.Errorf("a session registered the gate's function %s", id)
		}
	}
	if _, ok := ids["fine::fn"]; !ok {
		t.Errorf("the sessions' other registrations were refused too: %v", ids)
	}
	client(t, urls[0], "", map[string]protocol.Handler{"my::auth": auth, "my::mw": echo("my::mw")})
	waitListed(t, admin, "my::auth", true)
}

// A session's trigger on its own function is revoked when the function's id passes to another
// worker whose function the session may not call: the provider would call it with its rights.
func TestRBACTriggerRevokedWhenItsFunctionChangesHands(t *testing.T) {
	l := Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{}}
	_, urls := serveListeners(t, l)
	fired := make(recordTriggers, 8)
	main := client(t, urls[0], "", nil)
	if err := main.RegisterTriggerType("cron", "", fired); err != nil {
		t.Fatal(err)
	}
	pub := client(t, urls[1], "", map[string]protocol.Handler{"x::fn": echo("x::fn")})
	id, _ := pub.RegisterTrigger("cron", "x::fn", map[string]any{"expression": "* * * * *"})
	select {
	case tr := <-fired:
		if tr.ID != id {
			t.Fatalf("the provider got %+v", tr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session's trigger on its own function never reached the provider")
	}
	if err := pub.Unregister("x::fn"); err != nil {
		t.Fatal(err)
	}
	waitListed(t, main, "x::fn", false)
	if e := pub.TriggerError(id); e != nil {
		t.Fatalf("revoked while no one serves x::fn: %v", e)
	}
	client(t, urls[0], "", map[string]protocol.Handler{"x::fn": echo("trusted x::fn")})
	var e *protocol.Error
	enginetest.Poll(5*time.Second, func() bool { e = pub.TriggerError(id); return e != nil })
	if e == nil || e.Code != errcode.Forbidden || !strings.Contains(e.Message, "x::fn") {
		t.Fatalf("trigger %s: error %v, want FORBIDDEN naming x::fn", id, e)
	}
	out, err := main.Call(context.Background(), FnListTriggers, map[string]any{"include_refused": true})
	if err != nil || strings.Contains(string(out), id) {
		t.Errorf("the revoked trigger is still registered: %s %v", out, err)
	}
}

// As in iii, infrastructure workers (iii's console, a queue worker) serve engine::* ids the
// engine does not serve itself, in default and from a connection outside a gated session; in
// another namespace, or from an RBAC session, the id stays the engine's.
func TestEngineIDsServedInDefaultByTrustedConnections(t *testing.T) {
	status := func(context.Context, json.RawMessage) (any, error) { return map[string]any{"ok": true}, nil }
	auth := func(context.Context, json.RawMessage) (any, error) {
		return map[string]any{"allow_function_registration": true}, nil
	}
	l := Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{AuthFunctionID: "t::auth"}}
	e, urls := serveListeners(t, l)
	client(t, urls[0], "", map[string]protocol.Handler{"t::auth": auth})
	session := client(t, urls[1], "", map[string]protocol.Handler{"engine::console::session": status, "fine::fn": status})
	// A connection's frames are applied in order: once a later call is answered, its
	// registrations were decided.
	_, _ = session.Call(context.Background(), "fine::fn", nil)
	if _, ok := e.Lookup("default", "fine::fn"); !ok {
		t.Fatal("the session may not register at all; the test shows nothing")
	}
	other := enginetest.Worker(t, urls[0], "shop", map[string]protocol.Handler{"engine::console::shop": status})
	console := enginetest.Worker(t, urls[0], "default", map[string]protocol.Handler{"engine::console::status": status})
	res, err := console.Call(context.Background(), "engine::console::status", nil)
	if err != nil || string(res) != `{"ok":true}` {
		t.Fatalf("engine::console::status from the trusted listener: %s, %v", res, err)
	}
	_, _ = other.Call(context.Background(), "engine::console::status", nil)
	for _, id := range []string{"engine::console::session", "engine::console::shop"} {
		for _, ns := range []string{"default", "shop"} {
			if _, ok := e.Lookup(ns, id); ok {
				t.Errorf("%s registered in %s", id, ns)
			}
		}
	}
}
