package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
)

type calls struct {
	mu   sync.Mutex
	seen map[string][]string // function -> payloads in call order
	meta map[string][]string // function -> invocation metadata in call order
	// block, when set, holds calls of block::fn until ctx ends.
	block bool
}

func (c *calls) call(ctx context.Context, fn, _ string, data, meta json.RawMessage, _ time.Duration) (json.RawMessage, error) {
	c.mu.Lock()
	c.seen[fn] = append(c.seen[fn], string(data))
	if c.meta == nil {
		c.meta = map[string][]string{}
	}
	c.meta[fn] = append(c.meta[fn], string(meta))
	n := len(c.seen[fn])
	c.mu.Unlock()
	switch {
	case fn == "bad::fn":
		return nil, errors.New("always fails")
	case fn == "flaky::fn" && n == 1:
		return nil, errors.New("fails the first time")
	case fn == "block::fn" && c.block:
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return json.RawMessage(`{}`), nil
}

func (c *calls) metas(fn string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.meta[fn]...)
}

func (c *calls) get(fn string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen[fn]...)
}

func openService(t *testing.T, cfg Config) (*Service, *calls) {
	t.Helper()
	st, err := jsstore.Open(context.Background(), jsstore.Config{Sync: "interval"}, t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	c := &calls{seen: map[string][]string{}}
	svc, _ := openOn(t, st, cfg, c)
	return svc, c
}

// openOn opens a queue service on st whose calls go to c; stop ends it (as a worker that
// stops), and the test's end does too.
func openOn(t *testing.T, st *jsstore.Store, cfg Config, c *calls) (svc *Service, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := Open(ctx, st.JS, "default", cfg, c.call, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); svc.Close() }) }
	t.Cleanup(stop)
	return svc, stop
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
		if id, _ := out.(map[string]any)["messageReceiptId"].(string); len(id) != 36 {
			t.Fatalf("receipt %q", id)
		}
	}
	if _, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"q","function_id":"bad::fn","data":{"x":1}}`)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "20 jobs", 10*time.Second, func() bool { return len(c.get("ok::fn")) == 20 })
	for i, got := range c.get("ok::fn") {
		if got != fmt.Sprint(i) {
			t.Fatalf("group order broken at %d: %v", i, c.get("ok::fn"))
		}
	}
	var dl map[string]any
	enginetest.Eventually(t, "the dead letter", 10*time.Second, func() bool {
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
	if id, _ := row["message_id"].(string); row["attempts"] != float64(3) || row["function_id"] != "bad::fn" || len(id) != 36 {
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
	enginetest.Eventually(t, "both subscribers", 10*time.Second, func() bool { return len(c.get("sub::a")) == 1 && len(c.get("sub::b")) == 1 })
	_ = svc.UnregisterTrigger(ctx, b)
	_, _ = svc.Publish(ctx, json.RawMessage(`{"topic":"orders","data":{"id":2}}`))
	enginetest.Eventually(t, "subscriber a", 10*time.Second, func() bool { return len(c.get("sub::a")) == 2 })
	if n := len(c.get("sub::b")); n != 1 {
		t.Errorf("unregistered subscriber got %d messages", n)
	}
}

func messageIDOf(t *testing.T, meta string) string {
	t.Helper()
	var m struct {
		MessageID string `json:"message_id"`
		From      string `json:"from"`
	}
	if err := json.Unmarshal([]byte(meta), &m); err != nil {
		t.Fatalf("metadata %q: %v", meta, err)
	}
	return m.MessageID
}

// Every message has a stable id: the caller's message_id, or a generated UUID, returned in the
// reply and passed to the function as metadata.message_id on every delivery (here a retry).
// Enqueueing or publishing the same id again within the duplicate window stores nothing.
func TestMessageIDs(t *testing.T) {
	svc, c := openService(t, Config{Queues: map[string]Settings{"q": {BackoffMS: 5}}})
	ctx := context.Background()
	out, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"q","function_id":"flaky::fn","data":1,"metadata":{"from":"caller"}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := out.(map[string]any)
	id, _ := r["message_id"].(string)
	if _, err := uuid.Parse(id); err != nil || r["messageReceiptId"] != id || r["duplicate"] != nil {
		t.Fatalf("reply %v: want a UUID message_id equal to messageReceiptId", r)
	}
	enginetest.Eventually(t, "the retry", 10*time.Second, func() bool { return len(c.metas("flaky::fn")) == 2 })
	for _, m := range c.metas("flaky::fn") {
		if got := messageIDOf(t, m); got != id || !strings.Contains(m, `"from":"caller"`) {
			t.Errorf("delivery metadata %s, want message_id %s and the caller's metadata", m, id)
		}
	}

	for i := range 2 {
		out, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"q","function_id":"ok::fn","data":"x","message_id":"order-7"}`))
		if err != nil {
			t.Fatal(err)
		}
		r := out.(map[string]any)
		if r["message_id"] != "order-7" || r["messageReceiptId"] != "order-7" || (r["duplicate"] == true) != (i == 1) {
			t.Errorf("enqueue %d of order-7: %v", i+1, r)
		}
	}
	if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: "s", FunctionID: "sub::fn", Config: json.RawMessage(`{"topic":"t"}`)}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := svc.Publish(ctx, json.RawMessage(`{"topic":"t","data":1,"message_id":"evt-1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Publish(ctx, json.RawMessage(`{"topic":"t","data":2}`)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the ok job and both topic messages", 10*time.Second, func() bool { return len(c.get("ok::fn")) >= 1 && len(c.get("sub::fn")) >= 2 })
	// The queue and the topic are drained when a later message arrived after the duplicates.
	if _, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"q","function_id":"ok::fn","data":"y"}`)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the second ok job", 10*time.Second, func() bool { return len(c.get("ok::fn")) >= 2 })
	// Deliveries run concurrently, so their order is not the publish order: count the ids.
	if got := c.get("ok::fn"); len(got) != 2 || idCount(t, c.metas("ok::fn"), "order-7") != 1 {
		t.Errorf("ok::fn got %v %v, want the order-7 job once", got, c.metas("ok::fn"))
	}
	if got := c.get("sub::fn"); len(got) != 2 || idCount(t, c.metas("sub::fn"), "evt-1") != 1 {
		t.Errorf("sub::fn got %v %v, want evt-1 once", got, c.metas("sub::fn"))
	}

	for _, bad := range []string{`"` + strings.Repeat("x", MaxMessageIDLen+1) + `"`, `"a\nb"`} {
		if _, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"q","function_id":"ok::fn","message_id":`+bad+`}`)); err == nil {
			t.Errorf("message_id %.20s accepted", bad)
		}
	}
}

// idCount is how many of the deliveries' metadata carry message_id id.
func idCount(t *testing.T, metas []string, id string) int {
	t.Helper()
	n := 0
	for _, m := range metas {
		if messageIDOf(t, m) == id {
			n++
		}
	}
	return n
}

// At least once: a worker that stops while a call runs leaves the message unacknowledged, and
// the next worker delivers it again with the same message_id.
func TestRedeliveryKeepsTheMessageID(t *testing.T) {
	st, err := jsstore.Open(context.Background(), jsstore.Config{Sync: "interval"}, t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	first := &calls{seen: map[string][]string{}, block: true}
	svc, stop := openOn(t, st, Config{}, first)
	out, err := svc.Enqueue(context.Background(), json.RawMessage(`{"queue":"q","function_id":"block::fn","data":1}`))
	if err != nil {
		t.Fatal(err)
	}
	id := out.(map[string]any)["message_id"].(string)
	enginetest.Eventually(t, "the first delivery", 10*time.Second, func() bool { return len(first.metas("block::fn")) == 1 })
	stop()
	second := &calls{seen: map[string][]string{}}
	openOn(t, st, Config{}, second)
	enginetest.Eventually(t, "the delivery again", 3*AckWait, func() bool { return len(second.metas("block::fn")) > 0 })
	if got := messageIDOf(t, first.metas("block::fn")[0]); got != id {
		t.Errorf("first delivery message_id %q, want %q", got, id)
	}
	if got := messageIDOf(t, second.metas("block::fn")[0]); got != id {
		t.Errorf("redelivery message_id %q, want %q", got, id)
	}
}

// A failed job waits for its retry in JetStream (NakWithDelay), not in the worker: with one
// delivery at a time, the next job runs while the failed one's 60s backoff is still going.
func TestRetryWaitsInJetStream(t *testing.T) {
	svc, c := openService(t, Config{Queues: map[string]Settings{"q": {Concurrency: 1, MaxRetries: 3, BackoffMS: 60_000}}})
	ctx := context.Background()
	if _, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"q","function_id":"bad::fn","data":1}`)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the failing call", 10*time.Second, func() bool { return len(c.get("bad::fn")) == 1 })
	if _, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"q","function_id":"ok::fn","data":2}`)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the next job", 10*time.Second, func() bool { return len(c.get("ok::fn")) == 1 })
	if n := len(c.get("bad::fn")); n != 1 {
		t.Errorf("the failed job was called %d times within its 60s backoff", n)
	}
}
