package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

type fakeMetrics map[string]any

func (f fakeMetrics) WorkerMetrics(id string) any { return f[id] }

// observer is the part of core.Observer discovery does not implement.
type observer struct{ *Discovery }

func (observer) StartCall(core.Call) (string, func(*protocol.Error)) { return "", nil }
func (observer) Telemetry(string, string, []byte)                    {}

// start serves an engine with discovery installed, reading worker metrics from m.
func start(t *testing.T, m MetricsSource) (*core.Engine, string) {
	t.Helper()
	e := core.New(core.Options{})
	e.SetObserver(observer{Install(e, m, nil)})
	return e, enginetest.Start(t, e).URL
}

func call(t *testing.T, w *protocol.Worker, fn string, in any) (map[string]any, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := w.Call(ctx, fn, in)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

func code(err error) string {
	var e *protocol.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func nop(context.Context, json.RawMessage) (any, error) { return nil, nil }

func TestFunctionInfo(t *testing.T) {
	_, url := start(t, nil)
	w := enginetest.Connect(t, protocol.Config{URL: url, Name: "svc", Namespace: "default"}, map[string]protocol.Handler{"svc::a": nop})
	enginetest.Connect(t, protocol.Config{URL: url, Name: "other", Namespace: "x"}, map[string]protocol.Handler{"only::x": nop})
	enginetest.Connect(t, protocol.Config{URL: url, Name: "amb1", Namespace: "p"}, map[string]protocol.Handler{"amb::f": nop})
	enginetest.Connect(t, protocol.Config{URL: url, Name: "amb2", Namespace: "q"}, map[string]protocol.Handler{"amb::f": nop})

	got, err := call(t, w, FnFunctionInfo, map[string]any{"function_id": "svc::a"})
	if err != nil {
		t.Fatal(err)
	}
	if got["worker_name"] != "svc" || got["namespace"] != "default" || got["registered_triggers"] == nil {
		t.Errorf("svc::a detail = %v", got)
	}
	// A bare id unique to one namespace resolves there.
	if got, err := call(t, w, FnFunctionInfo, map[string]any{"function_id": "only::x"}); err != nil || got["namespace"] != "x" {
		t.Errorf("only::x = %v, %v", got, err)
	}
	// In two namespaces it is ambiguous; a namespace selects one.
	if _, err := call(t, w, FnFunctionInfo, map[string]any{"function_id": "amb::f"}); code(err) != errcode.NotFound {
		t.Errorf("amb::f: err %v, want NOT_FOUND", err)
	}
	if got, err := call(t, w, FnFunctionInfo, map[string]any{"function_id": "amb::f", "namespace": "q"}); err != nil || got["worker_name"] != "amb2" {
		t.Errorf("amb::f in q = %v, %v", got, err)
	}
	if _, err := call(t, w, FnFunctionInfo, map[string]any{}); code(err) != errcode.InvalidArguments {
		t.Errorf("no id: err %v", err)
	}
	got, err = call(t, w, FnFunctionInfo, map[string]any{"function_ids": []string{"svc::a", "nope", "svc::a"}})
	if err != nil {
		t.Fatal(err)
	}
	list := got["functions"].([]any)
	if len(list) != 2 || list[1].(map[string]any)["error"] != "not_found" {
		t.Errorf("batch = %v", list)
	}
}

func TestWorkerInfoHasMetrics(t *testing.T) {
	m := fakeMetrics{}
	e, url := start(t, m)
	w := enginetest.Connect(t, protocol.Config{URL: url, Name: "svc", Namespace: "default"}, map[string]protocol.Handler{"svc::a": nop, "svc::b": nop})
	m[w.WorkerID()] = map[string]any{"cpu_percent": 12.5}
	_ = e
	got, err := call(t, w, FnWorkerInfo, map[string]any{"name": "svc"})
	if err != nil {
		t.Fatal(err)
	}
	wk := got["worker"].(map[string]any)
	if wk["id"] != w.WorkerID() || wk["function_count"] != 2.0 || wk["status"] != "connected" {
		t.Errorf("worker = %v", wk)
	}
	if lm, _ := wk["latest_metrics"].(map[string]any); lm["cpu_percent"] != 12.5 {
		t.Errorf("latest_metrics = %v", wk["latest_metrics"])
	}
	if fns := got["functions"].([]any); len(fns) != 2 {
		t.Errorf("functions = %v", fns)
	}
	if _, err := call(t, w, FnWorkerInfo, map[string]any{"name": "ghost"}); code(err) != errcode.NotFound {
		t.Errorf("ghost: %v", err)
	}
	got, err = call(t, w, FnWorkerInfo, map[string]any{"name": "engine"})
	if err != nil {
		t.Fatal(err)
	}
	if types := got["trigger_types"].([]any); len(types) != 2 {
		t.Errorf("engine trigger types = %v", types)
	}
}

func TestAvailabilityTriggers(t *testing.T) {
	_, url := start(t, nil)
	fnEvents := make(chan map[string]any, 10)
	wkEvents := make(chan map[string]any, 10)
	on := func(ch chan map[string]any) protocol.Handler {
		return func(_ context.Context, in json.RawMessage) (any, error) {
			var m map[string]any
			_ = json.Unmarshal(in, &m)
			ch <- m
			return nil, nil
		}
	}
	w := enginetest.Connect(t, protocol.Config{URL: url, Name: "watcher", Namespace: "default"}, map[string]protocol.Handler{"w::fn": on(fnEvents), "w::wk": on(wkEvents)})
	for typ, fn := range map[string]string{TriggerFunctionsAvailable: "w::fn", TriggerWorkersAvailable: "w::wk"} {
		if _, err := w.RegisterTrigger(typ, fn, map[string]any{}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the provider to accept both (the registration round trip).
	var got map[string]any
	var err error
	active := func() bool {
		got, err = call(t, w, core.FnListTriggers, map[string]any{})
		return err == nil && len(got["registered_triggers"].([]any)) == 2
	}
	if !enginetest.Poll(5*time.Second, active) {
		t.Fatalf("triggers never active: %v %v", got, err)
	}
	n := enginetest.Connect(t, protocol.Config{URL: url, Name: "newcomer", Namespace: "default"}, map[string]protocol.Handler{"new::a": nop, "new::b": nop})
	select {
	case ev := <-wkEvents:
		if ev["event"] != "worker_metadata_updated" || ev["worker_id"] != n.WorkerID() {
			t.Errorf("workers-available = %v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no workers-available event")
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-fnEvents:
			if ev["event"] != "functions_changed" {
				t.Fatalf("functions-available = %v", ev)
			}
			found := 0
			for _, f := range ev["functions"].([]any) {
				if id := f.(map[string]any)["function_id"]; id == "new::a" || id == "new::b" {
					found++
				}
			}
			if found == 2 {
				return
			}
		case <-timeout:
			t.Fatal("no functions-available event listing new::a and new::b")
		}
	}
}

// On a gated listener, the listings show a session only the functions it may call, as
// engine::functions::list does: a hidden function is not registered to engine::functions::info,
// its worker is not connected to engine::workers::info and not listed by engine::workers::list,
// and its triggers are not in engine::registered-triggers::list.
func TestGatedSessionSeesOnlyWhatItMayCall(t *testing.T) {
	urls := startGated(t, "api::*", "engine::*")
	noop := func(context.Context, json.RawMessage) (any, error) { return nil, nil }
	enginetest.Connect(t, protocol.Config{URL: urls[0], Name: "api", Namespace: ""}, map[string]protocol.Handler{"api::hello": noop})
	enginetest.Connect(t, protocol.Config{URL: urls[0], Name: "vault", Namespace: ""}, map[string]protocol.Handler{"secret::fn": noop})
	session := enginetest.Connect(t, protocol.Config{URL: urls[1], Name: "visitor", Namespace: ""}, nil)
	trusted := enginetest.Connect(t, protocol.Config{URL: urls[0], Name: "ops", Namespace: ""}, nil)

	if _, err := call(t, session, FnFunctionInfo, map[string]any{"function_id": "secret::fn"}); code(err) != errcode.NotFound {
		t.Errorf("functions::info of a hidden function: %v", err)
	}
	if _, err := call(t, session, FnFunctionInfo, map[string]any{"function_id": "api::hello"}); err != nil {
		t.Errorf("functions::info of a function the session may call: %v", err)
	}
	if _, err := call(t, session, FnWorkerInfo, map[string]any{"name": "vault"}); code(err) != errcode.NotFound {
		t.Errorf("workers::info of a worker serving only hidden functions: %v", err)
	}
	if _, err := call(t, trusted, FnFunctionInfo, map[string]any{"function_id": "secret::fn"}); err != nil {
		t.Errorf("an ungated worker's functions::info: %v", err)
	}
	names := func(w *protocol.Worker) (out []string) {
		res, err := call(t, w, protocol.FnListWorkers, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range res["workers"].([]any) {
			r := row.(map[string]any)
			out = append(out, r["name"].(string))
			for _, f := range r["functions"].([]any) {
				if f == "secret::fn" && w == session {
					t.Errorf("workers::list shows the session %s", f)
				}
			}
		}
		return out
	}
	if got := names(session); slices.Contains(got, "vault") || !slices.Contains(got, "api") || !slices.Contains(got, "visitor") {
		t.Errorf("workers::list to the session: %v", got)
	}
	if got := names(trusted); !slices.Contains(got, "vault") {
		t.Errorf("workers::list to an ungated worker: %v", got)
	}
}

// startGated serves an engine with discovery on a main listener and a gated one (rbac: without
// an auth function: Open sessions, exposing the matches given) and returns their URLs, main
// first.
func startGated(t *testing.T, expose ...string) []string {
	t.Helper()
	e := core.New(core.Options{})
	e.SetObserver(observer{Install(e, nil, nil)})
	var filters []rbac.Filter
	for _, m := range expose {
		filters = append(filters, rbac.Filter{Match: m})
	}
	gate := core.Listener{Name: "public", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{Expose: filters}}
	var bound []core.Bound
	var urls []string
	for _, l := range []core.Listener{{Name: "main"}, gate} {
		ln, url := enginetest.Listen(t)
		bound = append(bound, core.Bound{Listener: l, Net: ln})
		urls = append(urls, url)
	}
	enginetest.Go(t, func(ctx context.Context) error { return e.ServeAll(ctx, bound) })
	return urls
}

// A functions-available event handed to a function a session of a gated listener serves lists
// only the functions that session may call; a trusted worker's lists them all.
func TestGatedSessionFunctionsAvailable(t *testing.T) {
	urls := startGated(t, "api::*", "spy::*", "engine::*")
	events := func(ch chan []string) protocol.Handler {
		return func(_ context.Context, in json.RawMessage) (any, error) {
			var ev struct {
				Functions []struct {
					FunctionID string `json:"function_id"`
				} `json:"functions"`
			}
			_ = json.Unmarshal(in, &ev)
			var ids []string
			for _, f := range ev.Functions {
				ids = append(ids, f.FunctionID)
			}
			ch <- ids
			return nil, nil
		}
	}
	mine, theirs := make(chan []string, 16), make(chan []string, 16)
	session := enginetest.Connect(t, protocol.Config{URL: urls[1], Name: "visitor", Namespace: ""}, map[string]protocol.Handler{"spy::fn": events(mine)})
	trusted := enginetest.Connect(t, protocol.Config{URL: urls[0], Name: "ops", Namespace: ""}, map[string]protocol.Handler{"ops::fn": events(theirs)})
	if _, err := session.RegisterTrigger(TriggerFunctionsAvailable, "spy::fn", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if _, err := trusted.RegisterTrigger(TriggerFunctionsAvailable, "ops::fn", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	var err error
	active := func() bool {
		got, err = call(t, trusted, core.FnListTriggers, map[string]any{})
		return err == nil && len(got["registered_triggers"].([]any)) == 2
	}
	if !enginetest.Poll(5*time.Second, active) {
		t.Fatalf("triggers never active: %v %v", got, err)
	}
	noop := func(context.Context, json.RawMessage) (any, error) { return nil, nil }
	enginetest.Connect(t, protocol.Config{URL: urls[0], Name: "newcomer", Namespace: ""}, map[string]protocol.Handler{"api::new": noop, "secret::new": noop})
	wait := func(ch chan []string, want string) []string {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case ids := <-ch:
				if slices.Contains(ids, want) {
					return ids
				}
			case <-timeout:
				t.Fatalf("no functions-available event listing %s", want)
			}
		}
	}
	if ids := wait(mine, "api::new"); slices.Contains(ids, "secret::new") {
		t.Errorf("the session's event lists %v", ids)
	}
	wait(theirs, "secret::new")
}
