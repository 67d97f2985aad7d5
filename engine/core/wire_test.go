package core

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/protocol"
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
	_, url := startEngine(t, Options{})
	worker(t, url, "default", map[string]protocol.Handler{
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
	e, url := startEngine(t, Options{})
	rw := dialRawWorker(t, url)
	reg := rw.next(t, protocol.TypeWorkerRegistered)
	if err := rawSend(t, rw.c, invoke(uuid.NewString(), protocol.FnRegisterWorker, map[string]any{"name": "raw"})); err != nil {
		t.Fatal(err)
	}
	rw.next(t, protocol.TypeInvocationResult)
	if err := rawSend(t, rw.c, map[string]any{"type": protocol.TypeRegisterFunction, "id": "raw::fn"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "raw::fn registered", func() bool { _, ok := e.Lookup("default", "raw::fn"); return ok })

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
	gw := worker(t, url, "default", nil)
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
