package core

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

// serveListeners serves an engine on a main listener and the gated ones given, each on a free
// loopback port, and returns their URLs (main first).
func serveListeners(t *testing.T, gated ...Listener) (*Engine, []string) {
	t.Helper()
	return serveListenersWith(t, Options{}, gated...)
}

// serveListenersWith is serveListeners for an engine made with opts.
func serveListenersWith(t *testing.T, opts Options, gated ...Listener) (*Engine, []string) {
	t.Helper()
	e := New(opts)
	bound := []Bound{{Listener: e.mainListener()}}
	for _, l := range gated {
		bound = append(bound, Bound{Listener: l})
	}
	urls := make([]string, len(bound))
	for i := range bound {
		bound[i].Net, urls[i] = enginetest.Listen(t)
	}
	enginetest.Go(t, func(ctx context.Context) error { return e.ServeAll(ctx, bound) })
	return e, urls
}

// client connects a worker named t that presents token (none when empty), does not reconnect,
// and serves fns registered with opts.
func client(t *testing.T, url, token string, fns map[string]protocol.Handler, opts ...protocol.FuncOption) *protocol.Worker {
	t.Helper()
	return enginetest.Connect(t, protocol.Config{URL: url, Token: token, Name: "t", NoReconnect: true}, fns, opts...)
}

func echo(id string) protocol.Handler {
	return func(_ context.Context, in json.RawMessage) (any, error) {
		return map[string]any{"fn": id, "in": in}, nil
	}
}

// refusal dials url with token and returns the first frame the engine sends.
func refusal(t *testing.T, url, token string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, err := batchconn.Dial(ctx, url, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_, b, err := ws.ReadMessage(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ws.ReadMessage(nil, nil); err == nil {
		t.Error("the refused connection stayed open")
	}
	return m
}

// listed returns the function ids w sees in engine::functions::list.
func listed(t *testing.T, w *protocol.Worker) map[string]string {
	t.Helper()
	out, err := w.Call(context.Background(), protocol.FnListFunctions, nil)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Functions []struct {
			FunctionID  string `json:"function_id"`
			Description string `json:"description"`
		} `json:"functions"`
	}
	_ = json.Unmarshal(out, &r)
	ids := map[string]string{}
	for _, f := range r.Functions {
		ids[f.FunctionID] = f.Description
	}
	return ids
}

// waitListed polls until id is (want) or is not listed to w, within 5 s.
func waitListed(t *testing.T, w *protocol.Worker, id string, want bool) map[string]string {
	t.Helper()
	var ids map[string]string
	enginetest.Poll(5*time.Second, func() bool {
		ids = listed(t, w)
		_, ok := ids[id]
		return ok == want
	})
	return ids
}

func TestRBACListener(t *testing.T) {
	public := Listener{Name: "iii-worker-manager#public", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{
		AuthFunctionID: "auth::check", OnFunctionRegistration: "hook::fn",
		Expose: []rbac.Filter{{Match: "api::*"}, {Match: protocol.FnListFunctions}, {Metadata: map[string]rbac.MetaMatch{"public": {Exact: true}}}},
	}}
	missing := Listener{Name: "missing", HandshakeTimeout: time.Second, RBAC: &rbac.Config{AuthFunctionID: "nobody::here"}}
	slow := Listener{Name: "slow", HandshakeTimeout: 200 * time.Millisecond, RBAC: &rbac.Config{AuthFunctionID: "auth::slow"}}
	_, urls := serveListeners(t, public, missing, slow)

	var mu sync.Mutex
	var authIn rbac.AuthInput
	release := make(chan struct{})
	defer close(release)
	main := client(t, urls[0], "", map[string]protocol.Handler{
		"auth::check": func(_ context.Context, in json.RawMessage) (any, error) {
			mu.Lock()
			_ = json.Unmarshal(in, &authIn)
			mu.Unlock()
			if !strings.Contains(string(in), `"authorization":"Bearer good"`) {
				return nil, protocol.NewError("DENIED", "invalid token")
			}
			return map[string]any{"allowed_functions": []string{"extra::fn"}, "forbidden_functions": []string{"api::secret"},
				"context": map[string]string{"user": "u1"}, "function_registration_prefix": "u1"}, nil
		},
		"auth::slow": func(ctx context.Context, _ json.RawMessage) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return map[string]any{}, nil
		},
		"hook::fn": func(_ context.Context, in json.RawMessage) (any, error) {
			var reg struct {
				FunctionID string `json:"function_id"`
				Context    struct{ User string }
			}
			_ = json.Unmarshal(in, &reg)
			if strings.HasPrefix(reg.FunctionID, "denied::") {
				return false, nil
			}
			return map[string]string{"description": "hooked for " + reg.Context.User}, nil
		},
		"api::echo": echo("api::echo"), "api::secret": echo("api::secret"), "hidden::fn": echo("hidden::fn"), "extra::fn": echo("extra::fn"),
	})
	client(t, urls[0], "", map[string]protocol.Handler{"meta::fn": echo("meta::fn")},
		func(m *protocol.Message) { m.Metadata = json.RawMessage(`{"public":true}`) })

	pub := client(t, urls[1], "good", map[string]protocol.Handler{"mine": echo("mine"), "denied::x": echo("denied::x")})
	mu.Lock()
	if authIn.Headers["authorization"] != "Bearer good" || authIn.IPAddress != "127.0.0.1" || authIn.QueryParams == nil {
		t.Errorf("auth input %+v", authIn)
	}
	mu.Unlock()
	ctx := context.Background()
	for _, id := range []string{"api::echo", "meta::fn", "extra::fn"} {
		if out, err := pub.Call(ctx, id, map[string]int{"x": 1}); err != nil || !strings.Contains(string(out), id) {
			t.Errorf("%s from the public listener: %s, %v", id, out, err)
		}
	}
	for _, id := range []string{"api::secret", "hidden::fn", "engine::workers::list"} {
		if _, err := pub.Call(ctx, id, nil); code(err) != errcode.Forbidden {
			t.Errorf("%s from the public listener: %v, want FORBIDDEN", id, err)
		}
	}
	// The main listener is not gated: it calls everything, the prefixed function of the public
	// worker included, which gets the call under its own name.
	if out, err := main.Call(ctx, "hidden::fn", nil); err != nil || !strings.Contains(string(out), "hidden::fn") {
		t.Errorf("hidden::fn from main: %s, %v", out, err)
	}
	ids := waitListed(t, main, "u1::mine", true)
	if ids["u1::mine"] != "hooked for u1" {
		t.Errorf("the hook's description: %q (%v)", ids["u1::mine"], ids)
	}
	if _, ok := ids["u1::denied::x"]; ok {
		t.Error("the hook refused denied::x, but it is registered")
	}
	if out, err := main.Call(ctx, "u1::mine", nil); err != nil || !strings.Contains(string(out), `"fn":"mine"`) {
		t.Errorf("u1::mine from main: %s, %v", out, err)
	}
	// The public session sees only what it may call.
	seen := listed(t, pub)
	for _, id := range []string{"api::echo", "meta::fn", "extra::fn", protocol.FnListFunctions, "engine::channels::create"} {
		if _, ok := seen[id]; !ok {
			t.Errorf("%s not listed to the public session", id)
		}
	}
	for _, id := range []string{"api::secret", "hidden::fn", "auth::check", protocol.FnListWorkers} {
		if _, ok := seen[id]; ok {
			t.Errorf("%s listed to the public session", id)
		}
	}

	// Fail closed: a refused token, a missing auth function and one that does not answer in
	// time each get iii's error frame, then the close.
	for i, url := range []string{urls[1], urls[2], urls[3]} {
		m := refusal(t, url, "bad")
		errObj, _ := m["error"].(map[string]any)
		if m["type"] != "error" || errObj["code"] != AuthError {
			t.Errorf("listener %d: first frame %v, want an AUTH_ERROR error frame", i+1, m)
		}
		if want := []string{"invalid token", "not found", "did not answer"}[i]; !strings.Contains(errObj["message"].(string), want) {
			t.Errorf("listener %d: message %q, want it to contain %q", i+1, errObj["message"], want)
		}
	}
}

func TestMiddlewareListener(t *testing.T) {
	mw := Listener{Name: "mw", Middleware: "mw::gate", RBAC: &rbac.Config{Expose: []rbac.Filter{{Match: "*"}}}}
	_, urls := serveListeners(t, mw)
	var mainW *protocol.Worker
	mainW = client(t, urls[0], "", map[string]protocol.Handler{
		"mw::gate": func(ctx context.Context, in json.RawMessage) (any, error) {
			var mi rbac.MiddlewareInput
			_ = json.Unmarshal(in, &mi)
			if !strings.Contains(string(mi.Payload), "allow") {
				return nil, protocol.NewError("BLOCKED", "middleware blocked %s", mi.FunctionID)
			}
			return mainW.Call(ctx, mi.FunctionID, mi.Payload)
		},
		"svc::echo": echo("svc::echo"),
	})
	cl := client(t, urls[1], "", nil)
	ctx := context.Background()
	if _, err := cl.Call(ctx, "svc::echo", map[string]bool{"nope": true}); code(err) != "BLOCKED" {
		t.Errorf("blocked call: %v", err)
	}
	if out, err := cl.Call(ctx, "svc::echo", map[string]bool{"allow": true}); err != nil || !strings.Contains(string(out), "svc::echo") {
		t.Errorf("allowed call: %s, %v", out, err)
	}
	// Engine functions skip the middleware.
	if _, err := cl.Call(ctx, protocol.FnListFunctions, nil); err != nil {
		t.Errorf("engine function through the middleware listener: %v", err)
	}
}

type recordTriggers chan protocol.Trigger

func (r recordTriggers) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	r <- t
	return nil
}
func (r recordTriggers) UnregisterTrigger(context.Context, protocol.Trigger) error { return nil }

// TestRBACTriggers: a session registers triggers only of its allowed_trigger_types and as the
// hook admits, with its function_registration_prefix on the trigger's function; it registers
// no trigger type unless allow_trigger_type_registration.
func TestRBACTriggers(t *testing.T) {
	l := Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{AuthFunctionID: "auth::ok", OnTriggerRegistration: "hook::trig"}}
	_, urls := serveListeners(t, l)
	fired := make(recordTriggers, 4)
	main := client(t, urls[0], "", map[string]protocol.Handler{
		"auth::ok": func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"allowed_trigger_types": []string{"ok-type"}, "function_registration_prefix": "u1"}, nil
		},
		"hook::trig": func(_ context.Context, in json.RawMessage) (any, error) {
			if strings.Contains(string(in), `"function_id":"denied::`) {
				return false, nil
			}
			return map[string]any{}, nil
		},
	})
	for _, tt := range []string{"ok-type", "other-type"} {
		if err := main.RegisterTriggerType(tt, "", fired); err != nil {
			t.Fatal(err)
		}
	}
	pub := client(t, urls[1], "", map[string]protocol.Handler{"fine": echo("fine")})
	if err := pub.RegisterTriggerType("pub-type", "", fired); err != nil {
		t.Fatal(err)
	}
	other, _ := pub.RegisterTrigger("other-type", "fine", map[string]int{})
	denied, _ := pub.RegisterTrigger("ok-type", "denied::x", map[string]int{})
	ok, _ := pub.RegisterTrigger("ok-type", "fine", map[string]int{"n": 1})
	select {
	case tr := <-fired:
		if tr.ID != ok || tr.FunctionID != "u1::fine" {
			t.Errorf("the provider got %+v, want trigger %s for u1::fine", tr, ok)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the admitted trigger never reached its provider")
	}
	for _, id := range []string{other, denied} {
		var e *protocol.Error
		enginetest.Poll(5*time.Second, func() bool { e = pub.TriggerError(id); return e != nil })
		if e == nil || e.Code != errcode.Forbidden {
			t.Errorf("trigger %s: error %v, want FORBIDDEN", id, e)
		}
	}
	out, err := main.Call(context.Background(), "engine::triggers::list", nil)
	if err != nil || strings.Contains(string(out), "pub-type") || !strings.Contains(string(out), "ok-type") {
		t.Errorf("trigger types %s, %v: pub-type must be refused", out, err)
	}
}

// TestListenerOrigins: each listener has its own allowed_origins and its own Host check.
func TestListenerOrigins(t *testing.T) {
	_, urls := serveListeners(t, Listener{Name: "web", AllowedOrigins: []string{"http://app.example"}})
	mainAddr, webAddr := strings.TrimPrefix(urls[0], "ws://"), strings.TrimPrefix(urls[1], "ws://")
	if st, body := rawHandshake(t, mainAddr, "/", mainAddr, "http://app.example"); st != http.StatusForbidden || !strings.Contains(body, errcode.OriginForbidden) {
		t.Errorf("main listener: %d %s, want 403 ORIGIN_FORBIDDEN", st, body)
	}
	if st, body := rawHandshake(t, webAddr, "/", webAddr, "http://app.example"); st != http.StatusSwitchingProtocols {
		t.Errorf("web listener: %d %s, want the upgrade", st, body)
	}
	if st, body := rawHandshake(t, webAddr, "/", "rebound.example:80", ""); st != http.StatusForbidden || !strings.Contains(body, errcode.HostForbidden) {
		t.Errorf("web listener, rebound Host: %d %s, want 403 HOST_FORBIDDEN", st, body)
	}
}

// TestRBACNamespaces: an auth result with a namespaces map scopes the session: it registers
// only as a worker of one of its keys and calls what the namespace's grants name there; the
// engine lists its peer address.
func TestRBACNamespaces(t *testing.T) {
	l := Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{AuthFunctionID: "auth::ns"}}
	_, urls := serveListeners(t, l)
	main := client(t, urls[0], "", map[string]protocol.Handler{
		"auth::ns": func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"namespaces": map[string][]string{"orders": {`match("svc::*")`}}}, nil
		},
	})
	enginetest.Worker(t, urls[0], "orders", map[string]protocol.Handler{"svc::get": echo("svc::get"), "other::get": echo("other::get")})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	outside := protocol.NewWorker(protocol.Config{URL: urls[1], Namespace: "billing", NoReconnect: true})
	defer outside.Close()
	if err := outside.Start(ctx); code(err) != errcode.Forbidden {
		t.Errorf("a session scoped to orders registered in billing: %v", err)
	}
	inside := enginetest.Worker(t, urls[1], "orders", nil)
	if out, err := inside.Call(ctx, "svc::get", nil); err != nil || !strings.Contains(string(out), "svc::get") {
		t.Errorf("svc::get in orders: %s, %v", out, err)
	}
	if _, err := inside.Call(ctx, "other::get", nil); code(err) != errcode.Forbidden {
		t.Errorf("other::get in orders: %v, want FORBIDDEN", err)
	}
	out, err := main.Call(ctx, protocol.FnListWorkers, map[string]string{"search": "t-orders"})
	if err != nil || !strings.Contains(string(out), `"ip_address":"127.0.0.1"`) {
		t.Errorf("the session's row: %s, %v", out, err)
	}
}

// BenchmarkGatedCall compares a call's round trip from the main listener with one from an
// rbac listener whose expose_functions admits it (no middleware).
func BenchmarkGatedCall(b *testing.B) {
	e := New(Options{})
	gated := Listener{Name: "pub", RBAC: &rbac.Config{Expose: []rbac.Filter{{Match: "bench::*"}}}}
	bound := []Bound{{Listener: e.mainListener()}, {Listener: gated}}
	urls := make([]string, 2)
	for i := range bound {
		bound[i].Net, urls[i] = enginetest.Listen(b)
	}
	enginetest.Go(b, func(ctx context.Context) error { return e.ServeAll(ctx, bound) })
	ctx := context.Background()
	start := func(url string, fns map[string]protocol.Handler) *protocol.Worker {
		w := protocol.NewWorker(protocol.Config{URL: url, Name: "bench", NoReconnect: true})
		for id, h := range fns {
			_ = w.Register(id, h)
		}
		if err := w.Start(ctx); err != nil {
			b.Fatal(err)
		}
		return w
	}
	srv := start(urls[0], map[string]protocol.Handler{"bench::echo": func(_ context.Context, in json.RawMessage) (any, error) { return in, nil }})
	defer srv.Close()
	for i, name := range []string{"main", "rbac"} {
		cl := start(urls[i], nil)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := cl.Call(ctx, "bench::echo", map[string]int{"n": 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
		cl.Close()
	}
}
