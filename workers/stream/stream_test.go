package stream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/jsstore"
)

// caller records the calls the service makes; the condition function "cond" answers false for
// a change whose data is 1, true otherwise.
type caller struct {
	mu    sync.Mutex
	calls []string // "fn <payload>"
	got   chan struct{}
}

func (c *caller) Call(_ context.Context, fn string, payload any, _ ...protocol.CallOption) (json.RawMessage, error) {
	if strings.HasPrefix(fn, "stream::") {
		return nil, notFound(fn)
	}
	b, _ := json.Marshal(payload)
	c.mu.Lock()
	c.calls = append(c.calls, fn+" "+string(b))
	c.mu.Unlock()
	if fn == "cond" {
		if m, ok := payload.(Message); ok && string(m.Event.Data) == "1" {
			return json.RawMessage("false"), nil
		}
		return json.RawMessage("true"), nil
	}
	c.got <- struct{}{}
	return json.RawMessage("null"), nil
}

// notFound is the engine's answer to a call of a function nobody registered.
func notFound(fn string) error {
	return &protocol.Error{Code: errcode.FunctionNotFound, Message: "Function " + fn + " not found in namespace default."}
}

// next waits for the next handler call and returns its payload decoded.
func (c *caller) next(t *testing.T) (string, Message) {
	t.Helper()
	select {
	case <-c.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no trigger call within 10s")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	last := c.calls[len(c.calls)-1]
	fn, body, _ := strings.Cut(last, " ")
	var m Message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return fn, m
}

func open(t *testing.T, dir string, c Caller) (*Service, func()) {
	t.Helper()
	st, err := jsstore.Open(context.Background(), jsstore.Config{}, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := Open(context.Background(), st.JS, st.NC, "default", Options{}, c)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return svc, st.Close
}

func call(t *testing.T, fn func(context.Context, json.RawMessage) (any, error), payload string) string {
	t.Helper()
	out, err := fn(context.Background(), json.RawMessage(payload))
	if err != nil {
		t.Fatalf("%s: %v", payload, err)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func TestFunctionsAndDurability(t *testing.T) {
	dir := t.TempDir()
	svc, closeStore := open(t, dir, nil)
	for _, c := range []struct {
		fn       func(context.Context, json.RawMessage) (any, error)
		in, want string
	}{
		{svc.Set, `{"stream_name":"presence","group_id":"room-1","item_id":"u2","data":{"name":"Bob"}}`, `{"new_value":{"name":"Bob"},"old_value":null}`},
		{svc.Set, `{"stream_name":"presence","group_id":"room-1","item_id":"u1","data":{"name":"Alice"}}`, `{"new_value":{"name":"Alice"},"old_value":null}`},
		{svc.Set, `{"stream_name":"presence","group_id":"room-1","item_id":"u1","data":{"name":"Alice","n":1}}`, `{"new_value":{"name":"Alice","n":1},"old_value":{"name":"Alice"}}`},
		{svc.Set, `{"stream_name":"presence","group_id":"room-2","item_id":"u3","data":3}`, `{"new_value":3,"old_value":null}`},
		{svc.Set, `{"stream_name":"other","group_id":"g","item_id":"x","data":null}`, `{"new_value":null,"old_value":null}`},
		{svc.Get, `{"stream_name":"presence","group_id":"room-1","item_id":"u1"}`, `{"name":"Alice","n":1}`},
		{svc.Get, `{"stream_name":"presence","group_id":"room-1","item_id":"nobody"}`, `null`},
		{svc.Update, `{"stream_name":"presence","group_id":"room-1","item_id":"u1","ops":[{"type":"increment","path":"n","by":41},{"type":"merge","path":"","value":{"online":true}}]}`,
			`{"new_value":{"n":42,"name":"Alice","online":true},"old_value":{"name":"Alice","n":1}}`},
		{svc.Update, `{"stream_name":"presence","group_id":"room-1","item_id":"u9","ops":[{"type":"set","path":"a","value":1}]}`, `{"new_value":{"a":1},"old_value":null}`},
		{svc.List, `{"stream_name":"presence","group_id":"room-1"}`, `[{"n":42,"name":"Alice","online":true},{"name":"Bob"},{"a":1}]`},
		{svc.List, `{"stream_name":"presence","group_id":"empty"}`, `[]`},
		{svc.ListGroups, `{"stream_name":"presence"}`, `["room-1","room-2"]`},
		{svc.ListGroups, `{"stream_name":"none"}`, `[]`},
		{svc.Delete, `{"stream_name":"presence","group_id":"room-1","item_id":"u9"}`, `{"old_value":{"a":1}}`},
		{svc.Delete, `{"stream_name":"presence","group_id":"room-1","item_id":"u9"}`, `{"old_value":null}`},
		{svc.ListAll, `{}`, `{"count":2,"stream":[{"id":"other","groups":["g"]},{"id":"presence","groups":["room-1","room-2"]}]}`},
	} {
		if got := call(t, c.fn, c.in); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
	closeStore()

	// The store is on disk: a new process reads what the old one acknowledged.
	svc, closeStore = open(t, dir, nil)
	defer closeStore()
	if got := call(t, svc.Get, `{"stream_name":"presence","group_id":"room-1","item_id":"u1"}`); got != `{"n":42,"name":"Alice","online":true}` {
		t.Errorf("after reopening: %s", got)
	}
}

func TestBadPayloads(t *testing.T) {
	svc, closeStore := open(t, t.TempDir(), nil)
	defer closeStore()
	for _, c := range []struct {
		fn        func(context.Context, json.RawMessage) (any, error)
		in, field string
	}{
		{svc.Set, `{"group_id":"g","item_id":"i","data":1}`, "stream_name"},
		{svc.Get, `{"stream_name":"s","item_id":"i"}`, "group_id"},
		{svc.Delete, `{"stream_name":"s","group_id":"g"}`, "item_id"},
		{svc.List, `{"stream_name":"s"}`, "group_id"},
		{svc.ListGroups, `{}`, "stream_name"},
		{svc.Update, `[1]`, "payload must be an object"},
		{svc.Update, `{"stream_name":"s","group_id":"g","item_id":"i","ops":[{"type":"explode","path":"a"}]}`, "unknown op type"},
		{svc.Send, `{"stream_name":"s","group_id":"g"}`, "type"},
		{svc.Set, `{"stream_name":"s","group_id":"g","item_id":"i"}`, "data is required"},
		{svc.Update, `{"stream_name":"s","group_id":"g","item_id":"i"}`, "ops is required"},
	} {
		_, err := c.fn(context.Background(), json.RawMessage(c.in))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != errcode.InvalidArguments || !strings.Contains(pe.Message, c.field) {
			t.Errorf("%s: got %v, want INVALID_ARGUMENTS naming %s", c.in, err, c.field)
		}
	}
	// A refused update writes nothing.
	if got := call(t, svc.Get, `{"stream_name":"s","group_id":"g","item_id":"i"}`); got != "null" {
		t.Errorf("after a refused update: %s", got)
	}
}

func TestTriggers(t *testing.T) {
	c := &caller{got: make(chan struct{}, 16)}
	svc, closeStore := open(t, t.TempDir(), c)
	defer closeStore()
	ctx := context.Background()
	if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: "no-name", FunctionID: "f", Config: json.RawMessage(`{}`)}); err == nil {
		t.Error("a trigger without stream_name was accepted")
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(svc.RegisterTrigger(ctx, protocol.Trigger{ID: "a", FunctionID: "on-room1", Config: json.RawMessage(`{"stream_name":"chat","group_id":"room-1"}`)}))
	must(svc.RegisterTrigger(ctx, protocol.Trigger{ID: "b", FunctionID: "on-cond", Config: json.RawMessage(`{"stream_name":"chat","item_id":"m9","condition_function_id":"cond"}`)}))

	call(t, svc.Set, `{"stream_name":"chat","group_id":"room-1","item_id":"m1","data":{"text":"hi"}}`)
	fn, m := c.next(t)
	if fn != "on-room1" || m.Type != "stream" || m.StreamName != "chat" || m.GroupID != "room-1" || m.ID == nil || *m.ID != "m1" ||
		m.Event.Type != "create" || string(m.Event.Data) != `{"text":"hi"}` || m.Timestamp == 0 {
		t.Errorf("create: %s %+v", fn, m)
	}
	call(t, svc.Update, `{"stream_name":"chat","group_id":"room-1","item_id":"m1","ops":[{"type":"set","path":"text","value":"ho"}]}`)
	if fn, m = c.next(t); fn != "on-room1" || m.Event.Type != "update" || string(m.Event.Data) != `{"text":"ho"}` {
		t.Errorf("update: %s %+v", fn, m)
	}
	call(t, svc.Delete, `{"stream_name":"chat","group_id":"room-1","item_id":"m1"}`)
	if fn, m = c.next(t); fn != "on-room1" || m.Event.Type != "delete" || string(m.Event.Data) != `{"text":"ho"}` {
		t.Errorf("delete: %s %+v", fn, m)
	}
	// The condition answers false for data 1: the handler is skipped; true for 2: it runs.
	call(t, svc.Set, `{"stream_name":"chat","group_id":"room-2","item_id":"m9","data":1}`)
	call(t, svc.Set, `{"stream_name":"chat","group_id":"room-2","item_id":"m9","data":2}`)
	if fn, m = c.next(t); fn != "on-cond" || string(m.Event.Data) != "2" {
		t.Errorf("condition: %s %+v", fn, m)
	}
	call(t, svc.Send, `{"stream_name":"chat","group_id":"room-1","type":"typing","data":{"who":"ann"}}`)
	if fn, m = c.next(t); fn != "on-room1" || m.Event.Type != "event" || m.Event.Event == nil || m.Event.Event.Type != "typing" || m.ID != nil {
		t.Errorf("send: %s %+v", fn, m)
	}
	must(svc.UnregisterTrigger(ctx, protocol.Trigger{ID: "a"}))
	must(svc.UnregisterTrigger(ctx, protocol.Trigger{ID: "b"}))
	call(t, svc.Set, `{"stream_name":"chat","group_id":"room-1","item_id":"m2","data":1}`)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.calls {
		if strings.HasPrefix(cl, "on-room1 ") && strings.Contains(cl, `"id":"m2"`) {
			t.Errorf("an unregistered trigger fired: %s", cl)
		}
		if strings.HasPrefix(cl, "on-cond ") && strings.Contains(cl, `"data":1`) {
			t.Errorf("the handler ran although its condition answered false: %s", cl)
		}
	}
}

func read(t *testing.T, ws *websocket.Conn) Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestHub(t *testing.T) {
	svc, closeStore := open(t, t.TempDir(), nil)
	defer closeStore()
	// Written before the hub subscribes: only the sync carries it.
	call(t, svc.Set, `{"stream_name":"presence","group_id":"room-1","item_id":"u1","data":{"name":"Alice"}}`)
	hub, err := NewHub(svc)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	srv := httptest.NewServer(hub)
	defer srv.Close()

	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/stream/presence/room-1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	send := func(s string) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`not json`)
	send(`{"type":"join","data":{"subscriptionId":"g","streamName":"presence","groupId":"room-1"}}`)
	if m := read(t, ws); m.Event.Type != "sync" || string(m.Event.Data) != `[{"name":"Alice"}]` || m.ID != nil {
		t.Fatalf("group sync: %+v", m)
	}
	send(`{"type":"join","data":{"subscriptionId":"i","streamName":"presence","groupId":"room-2","id":"u7"}}`)
	if m := read(t, ws); m.Event.Type != "sync" || string(m.Event.Data) != `null` || m.ID == nil || *m.ID != "u7" {
		t.Fatalf("item sync: %+v", m)
	}
	// Another item of room-2 is not subscribed; u7 and room-1 are.
	call(t, svc.Set, `{"stream_name":"presence","group_id":"room-2","item_id":"u8","data":8}`)
	call(t, svc.Set, `{"stream_name":"presence","group_id":"room-2","item_id":"u7","data":7}`)
	if m := read(t, ws); m.Event.Type != "create" || m.GroupID != "room-2" || string(m.Event.Data) != "7" {
		t.Fatalf("item create: %+v", m)
	}
	call(t, svc.Set, `{"stream_name":"presence","group_id":"room-1","item_id":"u1","data":{"name":"Alice","online":true}}`)
	if m := read(t, ws); m.Event.Type != "update" || m.StreamName != "presence" || string(m.Event.Data) != `{"name":"Alice","online":true}` {
		t.Fatalf("group update: %+v", m)
	}
	send(`{"type":"leave","data":{"subscriptionId":"g","streamName":"presence","groupId":"room-1"}}`)
	// Frames are handled in order: once this join's sync is back, the leave is done.
	send(`{"type":"join","data":{"subscriptionId":"x","streamName":"none","groupId":"none"}}`)
	if m := read(t, ws); m.Event.Type != "sync" || m.StreamName != "none" {
		t.Fatalf("sync after the leave: %+v", m)
	}
	call(t, svc.Delete, `{"stream_name":"presence","group_id":"room-1","item_id":"u1"}`)
	call(t, svc.Delete, `{"stream_name":"presence","group_id":"room-2","item_id":"u7"}`)
	if m := read(t, ws); m.Event.Type != "delete" || m.GroupID != "room-2" || string(m.Event.Data) != "7" {
		t.Fatalf("after leave, the next message is the item's delete: %+v", m)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		code string
		want string
	}{
		{Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "redis", Config: map[string]any{"redis_url": "redis://x"}}}, errcode.ConfigUnsupported, `adapter.name: "redis"`},
		{Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "bridge"}}, errcode.ConfigUnsupported, `adapter.name: "bridge"`},
		{Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "mongo"}}, errcode.ConfigInvalid, `unknown adapter "mongo"`},
		{Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "kv", Config: map[string]any{"store_method": "tape"}}}, errcode.ConfigInvalid, "store_method"},
		{Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "kv", Config: map[string]any{"ttl": 1}}}, errcode.ConfigInvalid, `unknown key "ttl"`},
		{Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "kv", Config: map[string]any{"channel_size": 256}}}, errcode.ConfigUnsupported, "adapter.config.channel_size"},
		{Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "kv", Config: map[string]any{"save_interval_ms": 5}}}, errcode.ConfigInvalid, "adapter.config.save_interval_ms 5"},
		{Config{Host: "h", Port: 70000}, errcode.ConfigInvalid, "out of range"},
		{Config{Port: 1}, errcode.ConfigInvalid, "host"},
	} {
		_, err := c.cfg.Validate()
		var ce *errcode.Error
		if !errors.As(err, &ce) || ce.Code != c.code || !strings.Contains(ce.Message, c.want) {
			t.Errorf("%+v: got %v, want %s naming %s", c.cfg, err, c.code, c.want)
		}
	}
	st, err := Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "kv", Config: map[string]any{"store_method": "in_memory", "file_path": "/d"}}}.Validate()
	if err != nil || !st.Memory || st.DataDir != "/d" {
		t.Errorf("kv: %+v %v", st, err)
	}
	// A relative file_path is under $III_COMPOSE_DIR of the environment the caller hands down,
	// never of the process's own.
	t.Setenv("III_COMPOSE_DIR", "/from-process")
	rel := Config{Host: "h", Port: 1, Adapter: &Adapter{Name: "kv", Config: map[string]any{"file_path": "data"}}}
	if st, err := rel.Validate(); err != nil || st.DataDir != "data" {
		t.Errorf("no environment: %+v %v", st, err)
	}
	rel.LookupEnv = func(k string) (string, bool) {
		v, ok := map[string]string{"III_COMPOSE_DIR": "/project"}[k]
		return v, ok
	}
	if st, err := rel.Validate(); err != nil || st.DataDir != filepath.Join("/project", "data") {
		t.Errorf("under Compose: %+v %v", st, err)
	}
}

// authCaller answers the auth function with a context, refuses joins of stream "secret" and
// records the join and leave events.
type authCaller struct {
	mu     sync.Mutex
	events []string // "fn <payload>"
	auth   map[string]any
}

func (a *authCaller) Call(_ context.Context, fn string, payload any, _ ...protocol.CallOption) (json.RawMessage, error) {
	if strings.HasPrefix(fn, "stream::") {
		return nil, notFound(fn)
	}
	switch fn {
	case "auth":
		a.mu.Lock()
		a.auth = payload.(map[string]any)
		a.mu.Unlock()
		return json.RawMessage(`{"context":{"user":"ann"}}`), nil
	case "on-join", "on-leave":
		b, _ := json.Marshal(payload)
		a.mu.Lock()
		a.events = append(a.events, fn+" "+string(b))
		a.mu.Unlock()
		if fn == "on-join" && payload.(JoinEvent).StreamName == "secret" {
			return json.RawMessage(`{"unauthorized":true}`), nil
		}
	}
	return json.RawMessage("null"), nil
}

func (a *authCaller) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.events...)
}

func TestHubJoinLeaveAuth(t *testing.T) {
	a := &authCaller{}
	svc, closeStore := open(t, t.TempDir(), a)
	defer closeStore()
	ctx := context.Background()
	for _, tr := range []struct {
		h  protocol.TriggerHandler
		id string
	}{{JoinLeave{Svc: svc, Join: true}, "on-join"}, {JoinLeave{Svc: svc}, "on-leave"}} {
		if err := tr.h.RegisterTrigger(ctx, protocol.Trigger{ID: tr.id, FunctionID: tr.id}); err != nil {
			t.Fatal(err)
		}
	}
	hub, err := NewHub(svc)
	if err != nil {
		t.Fatal(err)
	}
	hub.AuthFunction = "auth"
	defer hub.Close()
	srv := httptest.NewServer(hub)
	defer srv.Close()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/stream/x?token=t1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	a.mu.Lock()
	if a.auth["path"] != "/stream/x" || a.auth["query_params"].(map[string][]string)["token"][0] != "t1" || a.auth["addr"] == "" {
		t.Errorf("auth input: %+v", a.auth)
	}
	a.mu.Unlock()
	send := func(s string) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"type":"join","data":{"subscriptionId":"s1","streamName":"secret","groupId":"g"}}`)
	if m := read(t, ws); m.Event.Type != "unauthorized" || m.StreamName != "secret" {
		t.Fatalf("refused join: %+v", m)
	}
	send(`{"type":"join","data":{"subscriptionId":"s2","streamName":"open","groupId":"g","id":"i"}}`)
	if m := read(t, ws); m.Event.Type != "sync" {
		t.Fatalf("join: %+v", m)
	}
	send(`{"type":"join","data":{"subscriptionId":"s3","streamName":"open","groupId":"h"}}`)
	read(t, ws)
	send(`{"type":"leave","data":{"subscriptionId":"s2"}}`)
	// A refused subscription gets nothing.
	call(t, svc.Set, `{"stream_name":"secret","group_id":"g","item_id":"i","data":1}`)
	call(t, svc.Set, `{"stream_name":"open","group_id":"h","item_id":"i","data":2}`)
	if m := read(t, ws); m.StreamName != "open" || m.GroupID != "h" || m.Event.Type != "create" {
		t.Fatalf("after the refusal and the leave: %+v", m)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	// Closing the connection leaves s3.
	enginetest.Poll(10*time.Second, func() bool { return len(a.seen()) >= 5 })
	want := []string{
		`on-join {"subscription_id":"s1","stream_name":"secret","group_id":"g","id":null,"context":{"user":"ann"}}`,
		`on-join {"subscription_id":"s2","stream_name":"open","group_id":"g","id":"i","context":{"user":"ann"}}`,
		`on-join {"subscription_id":"s3","stream_name":"open","group_id":"h","id":null,"context":{"user":"ann"}}`,
		`on-leave {"subscription_id":"s2","stream_name":"open","group_id":"g","id":"i","context":{"user":"ann"}}`,
		`on-leave {"subscription_id":"s3","stream_name":"open","group_id":"h","id":null,"context":{"user":"ann"}}`,
	}
	if got := a.seen(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("join/leave events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// BenchmarkSetFanout measures a stream::set on the embedded store (fsync before the answer) and
// its delivery to one WebSocket client of the group.
func BenchmarkSetFanout(b *testing.B) {
	st, err := jsstore.Open(context.Background(), jsstore.Config{}, b.TempDir(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	svc, err := Open(context.Background(), st.JS, st.NC, "default", Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	hub, err := NewHub(svc)
	if err != nil {
		b.Fatal(err)
	}
	defer hub.Close()
	srv := httptest.NewServer(hub)
	defer srv.Close()
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.CloseNow()
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"join","data":{"subscriptionId":"s","streamName":"s","groupId":"g"}}`))
	if _, _, err := ws.Read(ctx); err != nil { // the sync
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		payload := json.RawMessage(`{"stream_name":"s","group_id":"g","item_id":"i","data":` + strconv.Itoa(i) + `}`)
		if _, err := svc.Set(ctx, payload); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ws.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
