package core

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// rawWorker is a worker spoken to frame by frame: every frame it receives is kept.
type rawWorker struct {
	c      *websocket.Conn
	mu     sync.Mutex
	frames []map[string]any
	got    chan map[string]any
}

func dialRawWorker(t *testing.T, url string) *rawWorker {
	t.Helper()
	rw := &rawWorker{c: rawDial(t, url), got: make(chan map[string]any, 256)}
	go func() {
		for {
			_, b, err := rw.c.Read(context.Background())
			if err != nil {
				close(rw.got)
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			rw.mu.Lock()
			rw.frames = append(rw.frames, m)
			rw.mu.Unlock()
			rw.got <- m
		}
	}()
	return rw
}

// next waits for the next frame of type typ.
func (rw *rawWorker) next(t *testing.T, typ string) map[string]any {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-rw.got:
			if !ok {
				t.Fatalf("connection closed while waiting for %s", typ)
			}
			if m["type"] == typ {
				return m
			}
		case <-timeout:
			t.Fatalf("no %s frame", typ)
		}
	}
}

func (rw *rawWorker) all() []map[string]any {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return append([]map[string]any(nil), rw.frames...)
}

// TestFunctionWithoutResultOmitsResult: a function that returns nothing (or null) reaches its
// caller as an invocationresult without a result key, as iii sends it, on the forwarded path
// and for a worker's call alike.
func TestFunctionWithoutResultOmitsResult(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"t::nothing": func(context.Context, json.RawMessage) (any, error) { return nil, nil },
		"t::null":    func(context.Context, json.RawMessage) (any, error) { return json.RawMessage("null"), nil },
		"t::zero":    func(context.Context, json.RawMessage) (any, error) { return 0, nil },
	})
	c := rawDial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, fn := range []string{"t::nothing", "t::null", "t::zero", protocol.FnRegisterWorker} {
		id := uuid.NewString()
		data := any(nil)
		if fn == protocol.FnRegisterWorker {
			data = map[string]any{"name": "raw"}
		}
		if err := rawSend(t, c, invoke(id, fn, data)); err != nil {
			t.Fatal(err)
		}
		_, b := nextResult(t, ctx, c)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		res, has := m["result"]
		switch {
		case i < 2 && has:
			t.Errorf("%s: frame %s carries a result", fn, b)
		case i >= 2 && !has:
			t.Errorf("%s: frame %s lacks its result", fn, b)
		case fn == "t::zero" && string(res) != "0":
			t.Errorf("%s: result %s", fn, res)
		}
	}
}

// TestEngineIDsAreUUIDs: every id the engine makes and sends parses as a UUID: the worker id
// and reattach token of workerregistered, the invocation ids of calls it forwards (from a
// worker, from a raw client and from the engine itself), and the channel ids of
// engine::channels::create. iii's SDKs decode them as UUIDs and drop a frame whose id is not.
func TestEngineIDsAreUUIDs(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	rw := dialRawWorker(t, url)
	reg := rw.next(t, protocol.TypeWorkerRegistered)
	if err := rawSend(t, rw.c, invoke(uuid.NewString(), protocol.FnRegisterWorker, map[string]any{"name": "raw"})); err != nil {
		t.Fatal(err)
	}
	rw.next(t, protocol.TypeInvocationResult)
	if err := rawSend(t, rw.c, map[string]any{"type": protocol.TypeRegisterFunction, "id": "raw::fn"}); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "raw::fn registered", 20*time.Second, func() bool { _, ok := e.Lookup("default", "raw::fn"); return ok })

	// Answer every invocation the raw worker gets, so the callers below return.
	invoked := make(chan map[string]any, 16)
	go func() {
		for m := range rw.got {
			if m["type"] == protocol.TypeInvokeFunction {
				invoked <- m
				_ = rawSend(t, rw.c, map[string]any{"type": protocol.TypeInvocationResult, "invocation_id": m["invocation_id"],
					"function_id": m["function_id"], "result": map[string]any{"ok": true}})
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gw := enginetest.Worker(t, url, "default", nil)
	if _, err := gw.Call(ctx, "raw::fn", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	client := rawDial(t, url)
	if err := rawSend(t, client, invoke("not-a-uuid-1", "raw::fn", map[string]any{})); err != nil {
		t.Fatal(err)
	}
	if m, _ := nextResult(t, ctx, client); m.InvocationID != "not-a-uuid-1" {
		t.Errorf("the caller's own id came back as %q", m.InvocationID)
	}
	if _, perr := e.Invoke(ctx, "default", "raw::fn", json.RawMessage(`{}`), 5*time.Second); perr != nil {
		t.Fatal(perr)
	}
	pair := channelPair(t, gw, map[string]any{})

	ids := map[string]string{"worker_id": str(reg["worker_id"]), "reattach_token": str(reg["reattach_token"]),
		"channel_id": pair.ChannelID, "reader.channel_id": pair.Reader.ChannelID, "writer.channel_id": pair.Writer.ChannelID}
	for i := range 3 {
		select {
		case m := <-invoked:
			ids[fmt.Sprintf("invocation_id of call %d", i+1)] = str(m["invocation_id"])
		case <-ctx.Done():
			t.Fatal("the raw worker got fewer than 3 invocations")
		}
	}
	for name, id := range ids {
		if _, err := uuid.Parse(id); err != nil {
			t.Errorf("%s %q is not a UUID: %v", name, id, err)
		}
	}
	// Whatever else the raw worker was sent: every *_id the engine chose is a UUID too.
	for _, m := range rw.all() {
		for _, k := range []string{"worker_id", "reattach_token"} {
			if v, ok := m[k].(string); ok {
				if _, err := uuid.Parse(v); err != nil {
					t.Errorf("%s frame: %s %q is not a UUID", m["type"], k, v)
				}
			}
		}
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// TestChannelKeepsOpcodes: a stream channel passes each frame with the opcode it was written
// with, text as text and binary as binary, as iii does: iii's SDKs hand text frames to the
// reader's onMessage and binary ones to its byte stream. The Go SDK does the same with
// ChannelWriter.SendMessage and ChannelReader.OnMessage, and without a callback keeps the text
// in the stream.
func TestChannelKeepsOpcodes(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	w := enginetest.Worker(t, url, "default", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type fr struct {
		typ websocket.MessageType
		b   string
	}
	sent := []fr{{websocket.MessageText, `{"progress":1}`}, {websocket.MessageBinary, "abc"},
		{websocket.MessageText, `{"progress":2}`}, {websocket.MessageBinary, "def"}}

	// Raw ends: the frames arrive as they were sent.
	p := channelPair(t, w, nil)
	raw := rawWriter(t, url, p.Writer)
	for _, f := range sent {
		if err := raw.Write(ctx, f.typ, []byte(f.b)); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close(websocket.StatusNormalClosure, "")
	u, _ := protocol.ChannelURL(url, p.Reader)
	rd, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.CloseNow()
	for i, want := range sent {
		typ, b, err := rd.Read(ctx)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got := (fr{typ, string(b)}); got != want {
			t.Errorf("frame %d: got %v %q, want %v %q", i, got.typ, got.b, want.typ, want.b)
		}
	}

	// Go SDK ends: messages to OnMessage, bytes to Read; no callback, everything to Read.
	for _, withCallback := range []bool{true, false} {
		p := channelPair(t, w, nil)
		wr, err := protocol.DialWriter(ctx, url, p.Writer)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range sent {
			if f.typ == websocket.MessageText {
				err = wr.SendMessage(f.b)
			} else {
				_, err = wr.Write([]byte(f.b))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := wr.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := protocol.DialReader(ctx, url, p.Reader)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []string
		if withCallback {
			r.OnMessage(func(m string) { msgs = append(msgs, m) })
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		want, wantMsgs := `abcdef`, []string{`{"progress":1}`, `{"progress":2}`}
		if !withCallback {
			want, wantMsgs = `{"progress":1}abc{"progress":2}def`, nil
		}
		if string(got) != want || fmt.Sprint(msgs) != fmt.Sprint(wantMsgs) {
			t.Errorf("callback %v: stream %q, messages %q; want %q, %q", withCallback, got, msgs, want, wantMsgs)
		}
	}
}

// listTriggersCall calls engine::registered-triggers::list with payload.
func listTriggersCall(t *testing.T, w *protocol.Worker, payload any) []map[string]any {
	t.Helper()
	raw, err := w.Call(context.Background(), FnListTriggers, payload)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Rows []map[string]any `json:"registered_triggers"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out.Rows
}

// TestRegisteredTriggersListLikeIII: engine::registered-triggers::list answers iii's rows by
// default: only the active triggers, each with config_summary and with worker_name the worker
// serving its function (not the one that registered it); include_pending adds the triggers not
// accepted yet and include_refused also the refused ones, with their status and error.
func TestRegisteredTriggersListLikeIII(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	server := protocol.NewWorker(protocol.Config{URL: url, Name: "jobs-worker"})
	_ = server.Register("jobs::on-tick", func(context.Context, json.RawMessage) (any, error) { return nil, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := server.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	registrant := enginetest.Worker(t, url, "default", nil) // named t-default
	long := strings.Repeat("x", 100)
	for _, cfg := range []map[string]any{{"every": long}, {"bad": true}} {
		if _, err := registrant.RegisterTrigger("tick", "jobs::on-tick", cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := registrant.RegisterTrigger("nobody-provides", "nowhere::fn", nil); err != nil {
		t.Fatal(err)
	}
	if rows := listTriggersCall(t, registrant, nil); len(rows) != 0 {
		t.Fatalf("parked triggers listed by default: %v", rows)
	}
	prov, _ := startProvider(t, url)
	defer prov.Close()
	enginetest.Eventually(t, "one active and one failed trigger", 5*time.Second, func() bool {
		n := map[any]int{}
		for _, r := range listTriggersCall(t, registrant, map[string]any{"include_refused": true, "trigger_type": "tick"}) {
			n[r["status"]]++
		}
		return n["active"] == 1 && n["failed"] == 1
	})
	rows := listTriggersCall(t, registrant, map[string]any{})
	if len(rows) != 1 {
		t.Fatalf("rows %v", rows)
	}
	r := rows[0]
	wantSummary := `{"every":"` + strings.Repeat("x", 70) + `…`
	if r["status"] != "active" || r["worker_name"] != "jobs-worker" || r["config_summary"] != wantSummary || r["function_id"] != "jobs::on-tick" {
		t.Errorf("row %v", r)
	}
	if rows := listTriggersCall(t, registrant, map[string]any{"worker": "jobs-worker"}); len(rows) != 1 {
		t.Errorf("worker filter: %v", rows)
	}
	if rows := listTriggersCall(t, registrant, map[string]any{"worker": "t-default"}); len(rows) != 0 {
		t.Errorf("worker filter matched the registrant: %v", rows)
	}
	if rows := listTriggersCall(t, registrant, map[string]any{"search": "ON-TICK"}); len(rows) != 1 {
		t.Errorf("search: %v", rows)
	}
	if rows := listTriggersCall(t, registrant, map[string]any{"search": "nowhere", "include_pending": true}); len(rows) != 1 {
		t.Errorf("search with include_pending: %v", rows)
	}
	pending := listTriggersCall(t, registrant, map[string]any{"include_pending": true})
	if len(pending) != 2 || pending[0]["status"] == "failed" || pending[1]["status"] == "failed" {
		t.Errorf("include_pending: %v", pending)
	}
	all := listTriggersCall(t, registrant, map[string]any{"include_refused": true})
	var refused map[string]any
	for _, r := range all {
		if r["status"] == "failed" {
			refused = r
		}
		if r["function_id"] == "nowhere::fn" && (r["status"] != "parked" || r["worker_name"] != "nowhere") {
			t.Errorf("parked row %v", r)
		}
	}
	if len(all) != 3 || refused == nil || refused["error"].(map[string]any)["code"] != "INVALID_TICK" {
		t.Errorf("include_refused: %v", all)
	}
	// Triggers of engine functions only with include_internal, as iii's.
	if _, err := registrant.RegisterTrigger("nobody-provides", "engine::functions::list", nil); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the internal trigger listed with include_internal", 5*time.Second, func() bool {
		return len(listTriggersCall(t, registrant, map[string]any{"include_refused": true, "include_internal": true})) == 4
	})
	if rows := listTriggersCall(t, registrant, map[string]any{"include_refused": true}); len(rows) != 3 {
		t.Errorf("the internal trigger listed without include_internal: %v", rows)
	}
	if _, err := registrant.Call(ctx, FnListTriggers, map[string]any{"include_refused": "yes"}); code(err) != errcode.InvalidArguments {
		t.Errorf("a malformed filter: %v", err)
	}
}

// TestWorkersListLikeIII: engine::workers::list rows carry iii's WorkerSummary fields with iii's
// types (status, function_count, connected_at_ms, active_invocations, isolation, ip_address,
// optional strings null when unknown) beside this engine's own (registered, pid, functions),
// and take iii's filters search, runtime and status.
func TestWorkersListLikeIII(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 1)
	serving := enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"w::a": func(context.Context, json.RawMessage) (any, error) { return nil, nil },
		"w::hold": func(ctx context.Context, _ json.RawMessage) (any, error) {
			started <- struct{}{}
			<-release
			return nil, nil
		},
	})
	before := time.Now().UnixMilli()
	rw := dialRawWorker(t, url)
	if err := rawSend(t, rw.c, invoke(uuid.NewString(), protocol.FnRegisterWorker, map[string]any{"name": "raw-node", "runtime": "node", "isolation": "vm"})); err != nil {
		t.Fatal(err)
	}
	rw.next(t, protocol.TypeInvocationResult)
	caller := enginetest.Worker(t, url, "default", nil)
	go func() { _, _ = caller.Call(context.Background(), "w::hold", nil) }()
	<-started

	list := func(payload any) map[string]map[string]any {
		t.Helper()
		raw, err := caller.Call(context.Background(), protocol.FnListWorkers, payload)
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Workers []map[string]any }
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		rows := map[string]map[string]any{}
		for _, r := range out.Workers {
			rows[str(r["id"])] = r
		}
		return rows
	}
	rows := list(map[string]any{})
	s := rows[serving.WorkerID()]
	if s["status"] != "connected" || s["function_count"] != 2.0 || s["active_invocations"] != 1.0 || s["runtime"] != "go" ||
		s["registered"] != true || fmt.Sprint(s["functions"]) != "[w::a w::hold]" || s["pid"] == nil {
		t.Errorf("serving worker row %v", s)
	}
	for _, k := range []string{"ip_address", "isolation", "description", "version"} {
		if v, ok := s[k]; !ok || v != nil {
			t.Errorf("%s: %v (present %v), want null", k, v, ok)
		}
	}
	var raw map[string]any
	for _, r := range rows {
		if r["name"] == "raw-node" {
			raw = r
		}
	}
	if raw == nil || raw["isolation"] != "vm" || raw["function_count"] != 0.0 || raw["active_invocations"] != 0.0 ||
		raw["connected_at_ms"].(float64) < float64(before) || raw["connected_at_ms"].(float64) > float64(time.Now().UnixMilli()) {
		t.Errorf("raw worker row %v", raw)
	}
	if got := list(map[string]any{"runtime": "node"}); len(got) != 1 {
		t.Errorf("runtime filter: %v", got)
	}
	if got := list(map[string]any{"search": "RAW-"}); len(got) != 1 {
		t.Errorf("search filter: %v", got)
	}
	if got := list(map[string]any{"status": "disconnected"}); len(got) != 0 {
		t.Errorf("status filter: %v", got)
	}
	if _, err := caller.Call(context.Background(), protocol.FnListWorkers, map[string]any{"runtime": 7}); code(err) != errcode.InvalidArguments {
		t.Errorf("a malformed filter: %v", err)
	}
}
