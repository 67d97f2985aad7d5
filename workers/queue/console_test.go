package queue

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/jsstore"
)

// flipper fails every call while failing is set, and records the message ids it got.
type flipper struct {
	failing atomic.Bool
	mu      sync.Mutex
	ok      map[string][]string // function -> message ids delivered while not failing
}

func (f *flipper) call(_ context.Context, fn, _ string, _, meta json.RawMessage, _ time.Duration) (json.RawMessage, error) {
	if f.failing.Load() {
		return nil, protocol.NewError("boom", "%s fails", fn)
	}
	var m struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(meta, &m)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ok[fn] = append(f.ok[fn], m.MessageID)
	return json.RawMessage(`{}`), nil
}

func (f *flipper) got(fn string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ok[fn]...)
}

func openFlipper(t *testing.T, ns string) (*Service, *flipper) {
	t.Helper()
	st, err := jsstore.Open(context.Background(), jsstore.Config{Sync: "interval"}, t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	f := &flipper{ok: map[string][]string{}}
	f.failing.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := Open(ctx, st.JS, ns, Config{Defaults: Settings{MaxRetries: -1, BackoffMS: 5}}, f.call, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); svc.Close() })
	return svc, f
}

func call(t *testing.T, h Handler, payload string, out any) {
	t.Helper()
	v, err := h(context.Background(), json.RawMessage(payload))
	if err != nil {
		t.Fatalf("%s: %v", payload, err)
	}
	b, _ := json.Marshal(v)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

// Dead letters of a job queue and of a topic are listed, counted, redriven one or all (to the
// failing subscriber only, with their message id) and discarded, with iii's shapes.
func TestDeadLetterAdministration(t *testing.T) {
	svc, f := openFlipper(t, "default")
	ctx := context.Background()
	for _, tr := range []protocol.Trigger{
		{ID: "a", FunctionID: "sub::a", Config: json.RawMessage(`{"topic":"orders"}`)},
	} {
		if err := svc.RegisterTrigger(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		if _, err := svc.Publish(ctx, json.RawMessage(`{"topic":"orders","data":{"n":1},"message_id":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Enqueue(ctx, json.RawMessage(`{"queue":"jobs","function_id":"job::fn","data":7,"message_id":"j1"}`)); err != nil {
		t.Fatal(err)
	}
	type dlqRow struct {
		Topic        string `json:"topic"`
		BrokerType   string `json:"broker_type"`
		MessageCount int    `json:"message_count"`
	}
	count := func(name string) int {
		var rows []dlqRow
		call(t, svc.DLQTopics, `{}`, &rows)
		for _, r := range rows {
			if r.Topic == name {
				return r.MessageCount
			}
		}
		return -1
	}
	enginetest.Eventually(t, "three dead letters of orders and one of jobs", 10*time.Second, func() bool { return count("orders") == 3 && count("jobs") == 1 })

	var topics []topicRow
	call(t, svc.ListTopics, `null`, &topics)
	want := []topicRow{{"jobs", "function_queue", 10}, {"orders", brokerTopic, 1}}
	if len(topics) != 2 || topics[0] != want[0] || topics[1] != want[1] {
		t.Errorf("list_topics %+v, want %+v", topics, want)
	}
	var stats map[string]any
	call(t, svc.TopicStats, `{"topic":"orders"}`, &stats)
	if stats["dlq_depth"] != float64(3) || stats["consumer_count"] != float64(1) || stats["depth"] != float64(0) || stats["config"] != nil {
		t.Errorf("topic_stats %v", stats)
	}
	var msgs []struct {
		ID        string          `json:"id"`
		Payload   json.RawMessage `json:"payload"`
		Error     string          `json:"error"`
		FailedAt  int64           `json:"failed_at"`
		Retries   int             `json:"retries"`
		SizeBytes int             `json:"size_bytes"`
	}
	call(t, svc.DLQMessages, `{"queue":"orders","limit":2}`, &msgs)
	first := len(msgs)
	var rest []struct {
		ID string `json:"id"`
	}
	call(t, svc.DLQMessages, `{"topic":"orders","offset":2}`, &rest)
	ids := map[string]bool{}
	for _, m := range msgs {
		ids[m.ID] = true
	}
	for _, m := range rest {
		ids[m.ID] = true
	}
	if first != 2 || len(rest) != 1 || len(ids) != 3 || !ids["m1"] || !ids["m2"] || !ids["m3"] {
		t.Errorf("dlq_messages pages %+v and %+v, want m1, m2 and m3 across them", msgs, rest)
	}
	if len(msgs) == 0 || string(msgs[0].Payload) != `{"n":1}` || !strings.Contains(msgs[0].Error, "sub::a fails") ||
		msgs[0].Retries != 1 || msgs[0].SizeBytes != 7 || time.Since(time.Unix(msgs[0].FailedAt, 0)) > time.Minute {
		t.Errorf("dlq_messages %+v", msgs)
	}

	f.failing.Store(false)
	var one map[string]any
	call(t, svc.RedriveOne, `{"topic":"orders","message_id":"m2"}`, &one)
	if one["queue"] != "orders" || one["message_id"] != "m2" || one["redriven"] != float64(1) {
		t.Errorf("redrive_message %v", one)
	}
	enginetest.Eventually(t, "m2 delivered again", 10*time.Second, func() bool { return len(f.got("sub::a")) == 1 })
	if got := f.got("sub::a"); got[0] != "m2" {
		t.Errorf("redriven delivery carried message_id %v", got)
	}
	call(t, svc.RedriveOne, `{"topic":"orders","message_id":"nope"}`, &one)
	if one["redriven"] != float64(0) {
		t.Errorf("redrive of an unknown id: %v", one)
	}
	call(t, svc.Discard, `{"queue":"orders","message_id":"m1"}`, &one)
	if one["redriven"] != float64(1) || count("orders") != 1 {
		t.Errorf("discard_message %v; %d left", one, count("orders"))
	}
	var all map[string]any
	call(t, svc.RedriveAll, `{"queue":"jobs"}`, &all)
	if all["queue"] != "jobs" || all["redriven"] != float64(1) {
		t.Errorf("redrive %v", all)
	}
	enginetest.Eventually(t, "the job delivered again", 10*time.Second, func() bool { return len(f.got("job::fn")) == 1 })
	call(t, svc.RedriveAll, `{"topic":"orders"}`, &all)
	enginetest.Eventually(t, "m3 delivered again", 10*time.Second, func() bool { return len(f.got("sub::a")) == 2 })
	if got := f.got("sub::a"); got[1] != "m3" || count("orders") != 0 || count("jobs") != 0 {
		t.Errorf("after redrive: deliveries %v, orders %d, jobs %d", got, count("orders"), count("jobs"))
	}
}

// Bad requests are INVALID_ARGUMENTS naming the function and field.
func TestDeadLetterAdministrationBadInput(t *testing.T) {
	svc, _ := openFlipper(t, "default")
	for _, tc := range []struct {
		h       Handler
		payload string
		want    string
	}{
		{svc.RedriveAll, `{}`, "iii::queue::redrive: queue is required"},
		{svc.RedriveOne, `{"queue":"q"}`, "iii::queue::redrive_message: message_id is required"},
		{svc.Discard, `{"queue":3,"message_id":"x"}`, "iii::queue::discard_message: queue must be a string"},
		{svc.TopicStats, `{}`, "engine::queue::topic_stats: topic is required"},
		{svc.DLQMessages, `{"topic":"t","limit":-1}`, "must not be negative"},
		{svc.DLQMessages, `[1]`, "must be an object"},
	} {
		_, err := tc.h(context.Background(), json.RawMessage(tc.payload))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != errcode.InvalidArguments || !strings.Contains(pe.Message, tc.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENTS %q", tc.payload, err, tc.want)
		}
	}
}

// iii's engine::queue::* ids are registered in default only; the iii::queue::* ones everywhere.
func TestFunctionsPerNamespace(t *testing.T) {
	svc, _ := openFlipper(t, "default")
	fns, skipped := svc.Functions("default")
	if len(skipped) != 0 || fns[ListTopics] == nil || fns[Redrive] == nil {
		t.Errorf("default: skipped %v", skipped)
	}
	fns, skipped = svc.Functions("team")
	if len(skipped) != 4 || fns[ListTopics] != nil || fns[DiscardMessage] == nil || fns["queue::enqueue"] == nil {
		t.Errorf("team: skipped %v", skipped)
	}
}

// condCaller answers the condition functions "no" (false), "broken" (an error) and "yes" (true)
// and records the handler calls.
type condCaller struct {
	mu    sync.Mutex
	asked map[string]int
	ran   map[string]int
}

func (c *condCaller) call(_ context.Context, fn, _ string, _, _ json.RawMessage, _ time.Duration) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch fn {
	case "no":
		c.asked[fn]++
		return json.RawMessage(`false`), nil
	case "broken":
		c.asked[fn]++
		return nil, errors.New("condition crashed")
	case "yes":
		c.asked[fn]++
		return json.RawMessage(`true`), nil
	}
	c.ran[fn]++
	return json.RawMessage(`{}`), nil
}

// A subscriber's condition function decides per message, as iii's queue: false completes the
// message without the handler, true runs it, a failed condition is a failed attempt that ends in
// the dead-letter queue.
func TestSubscriberCondition(t *testing.T) {
	st, err := jsstore.Open(context.Background(), jsstore.Config{Sync: "interval"}, t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	c := &condCaller{asked: map[string]int{}, ran: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := Open(ctx, st.JS, "default", Config{Defaults: Settings{MaxRetries: -1, BackoffMS: 5}}, c.call, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); svc.Close() })
	for _, cond := range []string{"no", "broken", "yes"} {
		tr := protocol.Trigger{ID: cond, FunctionID: "h::" + cond, Config: json.RawMessage(`{"topic":"t","condition_function_id":"` + cond + `"}`)}
		if err := svc.RegisterTrigger(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Publish(ctx, json.RawMessage(`{"topic":"t","data":1,"message_id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	var msgs []struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	}
	enginetest.Eventually(t, "the failed condition's dead letter", 10*time.Second, func() bool {
		call(t, svc.DLQMessages, `{"topic":"t"}`, &msgs)
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(msgs) == 1 && c.ran["h::yes"] == 1 && c.asked["no"] == 1
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ran["h::no"] != 0 || c.ran["h::broken"] != 0 || !strings.Contains(msgs[0].Error, "condition crashed") {
		t.Errorf("handlers %v, dead letter %+v", c.ran, msgs)
	}
}

// A subscriber's durable consumer stored by an earlier worker (one filter subject, no
// metadata) takes the redrive subject and the topic metadata when its trigger comes back.
func TestEarlierSubscriberConsumerUpgrades(t *testing.T) {
	svc, f := openFlipper(t, "default")
	f.failing.Store(false)
	ctx := context.Background()
	name := "t_" + short("orders", "sub::a", "")
	if _, err := svc.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: name, FilterSubject: svc.topicSubject("orders"),
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy, AckWait: AckWait, MaxDeliver: -1}); err != nil {
		t.Fatal(err)
	}
	if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: "a", FunctionID: "sub::a", Config: json.RawMessage(`{"topic":"orders"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Publish(ctx, json.RawMessage(`{"topic":"orders","data":1,"message_id":"p1"}`)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the delivery", 10*time.Second, func() bool { return len(f.got("sub::a")) == 1 })
	var topics []topicRow
	call(t, svc.ListTopics, `{}`, &topics)
	if len(topics) != 1 || topics[0] != (topicRow{"orders", brokerTopic, 1}) {
		t.Errorf("list_topics %+v", topics)
	}
}
