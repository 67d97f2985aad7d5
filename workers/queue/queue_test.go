package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
)

type calls struct {
	mu   sync.Mutex
	seen map[string][]string // function -> payloads in call order
}

func (c *calls) call(_ context.Context, fn, _ string, data, _ json.RawMessage, _ time.Duration) (json.RawMessage, error) {
	c.mu.Lock()
	c.seen[fn] = append(c.seen[fn], string(data))
	c.mu.Unlock()
	if fn == "bad::fn" {
		return nil, errors.New("always fails")
	}
	return json.RawMessage(`{}`), nil
}

func (c *calls) get(fn string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen[fn]...)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func openService(t *testing.T, cfg Config) (*Service, *calls) {
	t.Helper()
	st, err := jsstore.Open(context.Background(), jsstore.Config{Sync: "interval"}, t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &calls{seen: map[string][]string{}}
	svc, err := Open(ctx, st.JS, "default", cfg, c.call, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); svc.Close(); st.Close() })
	return svc, c
}

// Jobs of one group run in order one at a time, even with concurrency; a failing job is tried
// 1+max_retries times and then listed in the dead-letter queue.
func TestJobsGroupsAndDeadLetters(t *testing.T) {
	svc, c := openService(t, Config{Queues: map[string]Settings{"q": {Concurrency: 8, MaxRetries: 2, BackoffMS: 5}}})
	ctx := context.Background()
	for i := range 20 {
		p := fmt.Sprintf(`{"queue":"q","function_id":"ok::fn","data":%d,"group":"g1"}`, i)
		out, err := svc.Enqueue(ctx, json.RawMessage(p))
		if err != nil {
			t.Fatal(err)
		}
		if id := out.(map[string]string)["messageReceiptId"]; len(id) != 36 {
			t.Fatalf("receipt %q", id)
		}
	}
	if _, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"q","function_id":"bad::fn","data":{"x":1}}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "20 jobs", func() bool { return len(c.get("ok::fn")) == 20 })
	for i, got := range c.get("ok::fn") {
		if got != fmt.Sprint(i) {
			t.Fatalf("group order broken at %d: %v", i, c.get("ok::fn"))
		}
	}
	var dl map[string]any
	eventually(t, "the dead letter", func() bool {
		out, err := svc.DLQ(ctx, json.RawMessage(`{"queue":"q"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(out)
		_ = json.Unmarshal(b, &dl)
		return dl["count"] == float64(1)
	})
	if n := len(c.get("bad::fn")); n != 3 {
		t.Errorf("bad::fn tried %d times, want 3", n)
	}
	row := dl["messages"].([]any)[0].(map[string]any)
	if row["attempts"] != float64(3) || row["function_id"] != "bad::fn" {
		t.Errorf("dead letter %v", row)
	}
}

// A topic message reaches each subscriber once; an unregistered subscriber gets nothing more.
func TestTopicSubscribers(t *testing.T) {
	svc, c := openService(t, Config{})
	ctx := context.Background()
	a := protocol.Trigger{ID: "a", FunctionID: "sub::a", Config: json.RawMessage(`{"topic":"orders"}`)}
	b := protocol.Trigger{ID: "b", FunctionID: "sub::b", Config: json.RawMessage(`{"topic":"orders"}`)}
	for _, tr := range []protocol.Trigger{a, b} {
		if err := svc.RegisterTrigger(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: "x", FunctionID: "f", Config: json.RawMessage(`{}`)}); err == nil {
		t.Error("a trigger without topic was accepted")
	}
	if _, err := svc.Publish(ctx, json.RawMessage(`{"topic":"orders","data":{"id":1}}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both subscribers", func() bool { return len(c.get("sub::a")) == 1 && len(c.get("sub::b")) == 1 })
	_ = svc.UnregisterTrigger(ctx, b)
	_, _ = svc.Publish(ctx, json.RawMessage(`{"topic":"orders","data":{"id":2}}`))
	eventually(t, "subscriber a", func() bool { return len(c.get("sub::a")) == 2 })
	if n := len(c.get("sub::b")); n != 1 {
		t.Errorf("unregistered subscriber got %d messages", n)
	}
}
