package pubsub

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
)

type got struct {
	mu sync.Mutex
	by map[string][]string // function id -> data received
}

func (g *got) fire(t protocol.Trigger, data json.RawMessage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.by[t.FunctionID] = append(g.by[t.FunctionID], string(data))
}

func (g *got) wait(t *testing.T, fn string, n int) []string {
	t.Helper()
	var out []string
	enginetest.Poll(10*time.Second, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		out = append([]string(nil), g.by[fn]...)
		return len(out) >= n
	})
	sort.Strings(out)
	return out
}

// Every subscriber of a topic gets each message published to it, as the raw data; other topics'
// subscribers, and one that unsubscribed, get nothing.
func TestFanOut(t *testing.T) {
	st, err := jsstore.Open(context.Background(), jsstore.Config{}, t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := &got{by: map[string][]string{}}
	svc := New(st.NC, "default", g.fire)
	defer svc.Close()
	ctx := context.Background()
	for id, cfg := range map[string]string{"a": `{"topic":"orders.shipped"}`, "b": `{"topic":"orders.shipped"}`, "c": `{"topic":"other"}`, "gone": `{"topic":"orders.shipped"}`} {
		if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: id, FunctionID: id, Config: json.RawMessage(cfg)}); err != nil {
			t.Fatal(err)
		}
	}
	_ = svc.UnregisterTrigger(ctx, protocol.Trigger{ID: "gone"})
	for _, p := range []string{`{"topic":"orders.shipped","data":{"id":1}}`, `{"topic":"orders.shipped","data":"two"}`, `{"topic":"c","data":1}`} {
		out, err := svc.Publish(ctx, json.RawMessage(p))
		if err != nil || out != nil {
			t.Fatalf("publish %s: %v, %v", p, out, err)
		}
	}
	for _, fn := range []string{"a", "b"} {
		if d := g.wait(t, fn, 2); len(d) != 2 || d[0] != `"two"` || d[1] != `{"id":1}` {
			t.Errorf("%s got %v", fn, d)
		}
	}
	// A marker published after the rest, to other, proves the absences below are not a race.
	if _, err := svc.Publish(ctx, json.RawMessage(`{"topic":"other","data":"marker"}`)); err != nil {
		t.Fatal(err)
	}
	if d := g.wait(t, "c", 1); len(d) != 1 || d[0] != `"marker"` {
		t.Errorf("c got %v", d)
	}
	if d := g.wait(t, "gone", 0); len(d) != 0 {
		t.Errorf("an unsubscribed trigger got %v", d)
	}
	for _, p := range []string{`{"data":1}`, `[1]`} {
		if _, err := svc.Publish(ctx, json.RawMessage(p)); err == nil {
			t.Errorf("publish %s accepted", p)
		}
	}
	for _, c := range []string{`{}`, `{"topic":""}`, `{"topic":"t","extra":1}`, `"t"`} {
		if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: "x", Config: json.RawMessage(c)}); err == nil {
			t.Errorf("config %s accepted", c)
		}
	}
}
