package rbacproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/discovery"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
)

func TestDiscoveryNames(t *testing.T) {
	if fnListTriggerTypes != core.FnListTriggerTypes {
		t.Errorf("the proxy's %q differs from the engine's %q", fnListTriggerTypes, core.FnListTriggerTypes)
	}
	if fnFunctionInfo != discovery.FnFunctionInfo || triggerFunctionsAvailable != discovery.TriggerFunctionsAvailable || batchMax != discovery.BatchMax {
		t.Errorf("the proxy's discovery names %q %q %d differ from the engine's", fnFunctionInfo, triggerFunctionsAvailable, batchMax)
	}
}

// fakeBinder records what Watch registers, so a test can fire the trigger.
type fakeBinder struct {
	mu       sync.Mutex
	fns      map[string]protocol.Handler
	triggers []string // "type -> function"
}

func (b *fakeBinder) Register(id string, h protocol.Handler, _ ...protocol.FuncOption) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fns == nil {
		b.fns = map[string]protocol.Handler{}
	}
	b.fns[id] = h
	return nil
}

func (b *fakeBinder) RegisterTrigger(typ, fn string, _ any, _ ...protocol.TriggerOption) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.triggers = append(b.triggers, typ+" -> "+fn)
	return "t1", nil
}

// fire delivers a functions-available event to the functions bound to it.
func (b *fakeBinder) fire(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, tr := range b.triggers {
		typ, fn, _ := strings.Cut(tr, " -> ")
		if typ == discovery.TriggerFunctionsAvailable {
			if _, err := b.fns[fn](context.Background(), json.RawMessage(`{"event":"functions_changed","functions":[]}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// registry is the engine's functions' metadata as engine::functions::info answers it.
type registry struct {
	mu   sync.Mutex
	meta map[string]string // function id -> metadata JSON ("" none); absent: not registered
	fail error
	asks []string
}

func (r *registry) set(id, meta string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.meta[id] = meta
}

func (r *registry) info(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
	var req struct {
		FunctionIDs []string `json:"function_ids"`
		Namespace   string   `json:"namespace"`
	}
	_ = json.Unmarshal(in, &req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asks = append(r.asks, string(in))
	if r.fail != nil {
		return nil, r.fail
	}
	if len(req.FunctionIDs) > discovery.BatchMax {
		return nil, protocol.NewError("INVALID_ARGUMENTS", "too many function_ids (max %d)", discovery.BatchMax)
	}
	var rows []string
	for _, id := range req.FunctionIDs {
		meta, ok := r.meta[id]
		switch {
		case !ok:
			rows = append(rows, fmt.Sprintf(`{"function_id":%q,"error":"not_found"}`, id))
		case meta == "":
			rows = append(rows, fmt.Sprintf(`{"function_id":%q,"namespace":%q,"worker_name":"w","registered_triggers":[]}`, id, req.Namespace))
		default:
			rows = append(rows, fmt.Sprintf(`{"function_id":%q,"namespace":%q,"worker_name":"w","metadata":%s,"registered_triggers":[]}`, id, req.Namespace, meta))
		}
	}
	return json.RawMessage(`{"functions":[` + strings.Join(rows, ",") + `]}`), nil
}

func (r *registry) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asks...)
}

// metaSetup is a proxy exposing api::* by match and what has metadata public: true, with the
// engine's metadata in the returned registry.
func metaSetup(t *testing.T) (*fakeEngine, *Proxy, *registry, *fakeBinder, *websocket.Conn, *websocket.Conn) {
	t.Helper()
	e := newFakeEngine(t)
	cfg := gateConfig(e.url())
	cfg.RBAC.Expose = append(cfg.RBAC.Expose, rbac.Filter{Metadata: map[string]rbac.MetaMatch{"public": {Exact: true}}})
	reg := &registry{meta: map[string]string{"pub::card": `{"public":true}`, "priv::card": `{"public":false}`, "bare::fn": ""}}
	calls := gateCalls()
	calls.fns[discovery.FnFunctionInfo] = reg.info
	p := startProxy(t, cfg, calls)
	b := &fakeBinder{}
	if err := p.Watch(b); err != nil {
		t.Fatal(err)
	}
	ws := dial(t, p, "good")
	return e, p, reg, b, ws, e.conn(t)
}

// call sends an invocation of fn; want "sent" expects it at the engine, "FORBIDDEN" the proxy's
// answer. It reports what happened.
func call(t *testing.T, e *fakeEngine, ws *websocket.Conn, id, fn, want string) string {
	t.Helper()
	send(t, ws, `{"type":"invokefunction","invocation_id":"`+id+`","function_id":"`+fn+`","data":{}}`)
	if want == "sent" {
		select {
		case f := <-e.frames:
			if strings.Contains(f, `"function_id":"`+fn+`"`) {
				return "sent"
			}
			return "the engine got " + f
		case <-time.After(5 * time.Second):
			got, _ := read(t, ws)
			return "not sent within 5s; answered " + got
		}
	}
	got, err := read(t, ws)
	if err == nil && strings.Contains(got, `"code":"FORBIDDEN"`) && strings.Contains(got, `"invocation_id":"`+id+`"`) {
		return "FORBIDDEN"
	}
	return fmt.Sprintf("answered %s (%v)", got, err)
}

func listed(t *testing.T, e *fakeEngine, ws, up *websocket.Conn, id string, fns ...string) string {
	t.Helper()
	send(t, ws, `{"type":"invokefunction","invocation_id":"`+id+`","function_id":"engine::functions::list","data":{}}`)
	e.next(t)
	var rows []string
	for _, fn := range fns {
		rows = append(rows, fmt.Sprintf(`{"function_id":%q,"namespace":"default","worker_id":"w"}`, fn))
	}
	_ = up.Write(context.Background(), websocket.MessageText, []byte(`{"type":"invocationresult","invocation_id":"`+id+`","result":{"functions":[`+strings.Join(rows, ",")+`]}}`))
	got, err := read(t, ws)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Result struct {
			Functions []struct {
				FunctionID string `json:"function_id"`
			} `json:"functions"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(got), &res); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	var ids []string
	for _, f := range res.Result.Functions {
		ids = append(ids, f.FunctionID)
	}
	return strings.Join(ids, ",")
}

func TestMetadataFilter(t *testing.T) {
	e, _, reg, b, ws, up := metaSetup(t)
	if len(b.triggers) != 1 || b.triggers[0] != discovery.TriggerFunctionsAvailable+" -> "+FnFunctionsChanged {
		t.Fatalf("Watch bound %v", b.triggers)
	}
	for _, c := range [][2]string{{"pub::card", "sent"}, {"priv::card", "FORBIDDEN"}, {"bare::fn", "FORBIDDEN"}, {"gone::fn", "FORBIDDEN"}, {"api::echo", "sent"}} {
		if got := call(t, e, ws, "c-"+c[0], c[0], c[1]); got != c[1] {
			t.Errorf("%s: %s, want %s", c[0], got, c[1])
		}
	}
	if got := listed(t, e, ws, up, "l1", "api::echo", "bare::fn", "engine::log::info", "gone::fn", "priv::card", "pub::card"); got != "api::echo,engine::log::info,pub::card" {
		t.Errorf("listed %s", got)
	}
	asks := reg.asked()
	if len(asks) != 4 || asks[0] != `{"function_ids":["pub::card"],"namespace":"default"}` {
		t.Errorf("engine::functions::info asked %v: once per function (api::echo by match needs none), then the list's from the cache", asks)
	}

	// The functions register again with swapped metadata: once functions-available fired, the
	// decisions follow the new metadata.
	reg.set("pub::card", `{"public":false}`)
	reg.set("priv::card", `{"public":true}`)
	b.fire(t)
	if got := call(t, e, ws, "c2", "pub::card", "FORBIDDEN"); got != "FORBIDDEN" {
		t.Errorf("pub::card now public: false: %s", got)
	}
	if got := call(t, e, ws, "c3", "priv::card", "sent"); got != "sent" {
		t.Errorf("priv::card now public: true: %s", got)
	}
	if got := listed(t, e, ws, up, "l2", "priv::card", "pub::card"); got != "priv::card" {
		t.Errorf("listed after the change %s", got)
	}
}

func TestMetadataUnreadable(t *testing.T) {
	e, _, reg, _, ws, up := metaSetup(t)
	reg.mu.Lock()
	reg.fail = protocol.NewError("function_not_found", "function engine::functions::info not found")
	reg.mu.Unlock()
	if got := call(t, e, ws, "c1", "pub::card", "FORBIDDEN"); got != "FORBIDDEN" {
		t.Errorf("metadata unreadable: %s, want FORBIDDEN", got)
	}
	if got := call(t, e, ws, "c2", "api::echo", "sent"); got != "sent" {
		t.Errorf("a match filter still exposes api::echo: %s", got)
	}
	if got := listed(t, e, ws, up, "l1", "api::echo", "pub::card"); got != "api::echo" {
		t.Errorf("listed %s", got)
	}
	// A list of 40 asks no second batch after the first failed.
	before := len(reg.asked())
	fns := []string{"api::echo"}
	for i := range 40 {
		fns = append(fns, fmt.Sprintf("m::%02d", i))
	}
	if got := listed(t, e, ws, up, "l2", fns...); got != "api::echo" {
		t.Errorf("listed %s", got)
	}
	if n := len(reg.asked()) - before; n != 1 {
		t.Errorf("asked %d batches after a failure, want 1", n)
	}
	// A failure is not cached: once the engine answers again, so does the gate.
	reg.mu.Lock()
	reg.fail = nil
	reg.mu.Unlock()
	if got := call(t, e, ws, "c3", "pub::card", "sent"); got != "sent" {
		t.Errorf("metadata readable again: %s", got)
	}
}

func TestMetadataLookupDeadline(t *testing.T) {
	e, p, _, _, ws, _ := metaSetup(t)
	calls := p.calls.(*fakeCalls)
	calls.mu.Lock()
	calls.fns[discovery.FnFunctionInfo] = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	calls.mu.Unlock()
	start := time.Now()
	if got := call(t, e, ws, "c1", "pub::card", "FORBIDDEN"); got != "FORBIDDEN" {
		t.Errorf("a lookup past its deadline: %s, want FORBIDDEN", got)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered after %v; the deadline is handshake_timeout_ms (500ms)", d)
	}
}

func TestMetadataBatches(t *testing.T) {
	e, _, reg, _, ws, up := metaSetup(t)
	var fns []string
	for i := range 40 {
		id := fmt.Sprintf("m::%02d", i)
		reg.set(id, fmt.Sprintf(`{"public":%v}`, i%2 == 0))
		fns = append(fns, id)
	}
	got := listed(t, e, ws, up, "l1", fns...)
	if n := strings.Count(got, "m::"); n != 20 || strings.Contains(got, "m::01") {
		t.Errorf("listed %s, want the 20 even ones", got)
	}
	asks := reg.asked()
	if len(asks) != 2 || strings.Count(asks[0], "m::") != discovery.BatchMax || strings.Count(asks[1], "m::") != 8 {
		t.Errorf("asked %d times (%v), want batches of %d and 8", len(asks), asks, discovery.BatchMax)
	}
}

// store looks ids up in c and lands read for them, as Proxy.metadata does.
func store(c *metaCache, ns string, read map[string]json.RawMessage) {
	var ids []string
	for id := range read {
		ids = append(ids, id)
	}
	_, _, mine, own, gen := c.claim(ns, ids)
	c.land(gen, ns, own, mine, read)
}

func TestMetaCache(t *testing.T) {
	c := newMetaCache()
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	c.max = 2
	store(c, "default", map[string]json.RawMessage{"a": json.RawMessage(`{"x":1}`), "b": nil})
	if m, ok := c.get("default", "a"); !ok || string(m) != `{"x":1}` {
		t.Errorf("a: %s %v", m, ok)
	}
	if _, ok := c.get("other", "a"); ok {
		t.Error("an entry of default answers for namespace other")
	}
	store(c, "default", map[string]json.RawMessage{"c": nil})
	if len(c.entries) != 2 {
		t.Errorf("%d entries, want at most 2", len(c.entries))
	}
	if _, ok := c.get("default", "c"); !ok {
		t.Error("the newest entry was evicted")
	}

	// A second lookup of an id in flight waits for the first, which alone asks the engine.
	_, _, mine, own, gen := c.claim("default", []string{"d", "d"})
	hits, wait, _, own2, _ := c.claim("default", []string{"d", "c"})
	if len(own) != 1 || len(own2) != 0 || wait["d"] == nil || len(hits) != 1 {
		t.Fatalf("claims: own %v, then own %v wait %v hits %v", own, own2, wait, hits)
	}
	c.land(gen, "default", own, mine, map[string]json.RawMessage{"d": json.RawMessage(`{"y":2}`)})
	select {
	case <-wait["d"].done:
		if !wait["d"].ok || string(wait["d"].meta) != `{"y":2}` {
			t.Errorf("the waiter got %s %v", wait["d"].meta, wait["d"].ok)
		}
	default:
		t.Error("the waiter's flight was not completed")
	}

	// A lookup that began before a drop does not store its answer, nor do later ones wait for it.
	_, _, mine, own, gen = c.claim("default", []string{"e"})
	c.drop()
	if _, wait, _, own2, _ = c.claim("default", []string{"e"}); len(wait) != 0 || len(own2) != 1 {
		t.Errorf("after drop: wait %v own %v, want a lookup of its own", wait, own2)
	}
	c.land(gen, "default", own, mine, map[string]json.RawMessage{"e": nil})
	if _, ok := c.get("default", "e"); ok || len(c.entries) != 0 {
		t.Errorf("after drop: %v", c.entries)
	}
	store(c, "default", map[string]json.RawMessage{"a": nil})
	now = now.Add(metaCacheTTL + time.Second)
	if _, ok := c.get("default", "a"); ok {
		t.Error("an entry older than the TTL answered")
	}
	// An unreadable answer completes the flight, not ok, and is not cached.
	_, _, mine, own, gen = c.claim("default", []string{"f"})
	c.land(gen, "default", own, mine, nil)
	if f := mine["f"]; f.ok {
		t.Error("an unreadable lookup is ok")
	}
	if _, ok := c.get("default", "f"); ok {
		t.Error("an unreadable lookup was cached")
	}
}

func TestWatchWithoutMetadataFilters(t *testing.T) {
	e := newFakeEngine(t)
	p := startProxy(t, gateConfig(e.url()), gateCalls())
	b := &fakeBinder{}
	if err := p.Watch(b); err != nil || len(b.triggers) != 0 || len(b.fns) != 0 {
		t.Errorf("Watch without metadata filters bound %v %v (%v)", b.triggers, b.fns, err)
	}
}
