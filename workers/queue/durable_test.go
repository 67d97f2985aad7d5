package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

// durable:subscriber configs become the "queue" trigger's; what the queue cannot honour is
// refused.
func TestDurableConfig(t *testing.T) {
	for in, want := range map[string]string{
		`{"topic":"t"}`:                     `{"topic":"t"}`,
		`{"topic":"t","queue_config":null}`: `{"topic":"t"}`,
		`{"topic":"t","queue_config":{"maxRetries":5,"concurrency":2,"backoffDelayMs":200,"visibilityTimeout":3000,"backoffType":"exponential","type":"standard"}}`: `{"backoff_ms":200,"concurrency":2,"max_retries":5,"timeout_ms":3000,"topic":"t"}`,
		`{"topic":"t","queue_config":{"type":"fifo"}}`: `{"concurrency":1,"topic":"t"}`,
		`{"queue":"t","max_retries":1,"backoff_ms":5}`: `{"backoff_ms":5,"max_retries":1,"queue":"t"}`,
		`{"topic":"t","condition_function_id":"c"}`:    `{"condition_function_id":"c","topic":"t"}`,

		`{"topic":"t","description":"orders"}`: `{"topic":"t"}`,
	} {
		got, err := durableConfig([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{
		`"t"`, `{"topic":"t","extra":1}`,
		`{"topic":"t","queue_config":{"delaySeconds":1}}`, `{"topic":"t","queue_config":{"maxPriority":3}}`,
		`{"topic":"t","queue_config":{"backoffType":"fixed"}}`, `{"topic":"t","queue_config":{"type":"lifo"}}`,
		`{"topic":"t","queue_config":{"maxRetries":-1}}`, `{"topic":"t","queue_config":{"type":"fifo","concurrency":4}}`,
		`{"topic":"t","queue_config":[1]}`, `{"topic":"t","queue_config":{"x":1}}`,
	} {
		if got, err := durableConfig([]byte(in)); err == nil {
			t.Errorf("%s accepted as %s", in, got)
		}
	}
}

// A durable:subscriber trigger is a "queue" subscriber under iii's name: registered with iii's
// queue_config it gets what is published on its topic (fifo: one at a time, in order), a failing
// delivery is retried up to queue_config.maxRetries, and once unregistered it gets nothing.
func TestDurableSubscriber(t *testing.T) {
	svc, c := openService(t, Config{})
	ctx := context.Background()
	d := svc.Durable()
	sub := protocol.Trigger{ID: "d", FunctionID: "sub::d", Config: json.RawMessage(`{"topic":"orders","queue_config":{"type":"fifo"}}`)}
	flaky := protocol.Trigger{ID: "f", FunctionID: "flaky::fn", Config: json.RawMessage(`{"topic":"orders","queue_config":{"maxRetries":2,"backoffDelayMs":1}}`)}
	for _, tr := range []protocol.Trigger{sub, flaky} {
		if err := d.RegisterTrigger(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.RegisterTrigger(ctx, protocol.Trigger{ID: "x", FunctionID: "f", Config: json.RawMessage(`{"topic":"orders","queue_config":{"delaySeconds":5}}`)}); err == nil {
		t.Error("a queue_config this queue cannot honour was accepted")
	}
	for i := 1; i <= 3; i++ {
		if _, err := svc.Publish(ctx, json.RawMessage(fmt.Sprintf(`{"topic":"orders","data":{"n":%d}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, "the fifo subscriber's three messages", 10*time.Second, func() bool { return len(c.get("sub::d")) == 3 })
	if got := strings.Join(c.get("sub::d"), " "); got != `{"n":1} {"n":2} {"n":3}` {
		t.Errorf("fifo order: %s", got)
	}
	// flaky::fn fails its first delivery: that message comes again, so 4 calls for 3 messages.
	enginetest.Eventually(t, "the retried subscriber", 10*time.Second, func() bool { return len(c.get("flaky::fn")) == 4 })

	if err := d.UnregisterTrigger(ctx, sub); err != nil {
		t.Fatal(err)
	}
	_, _ = svc.Publish(ctx, json.RawMessage(`{"topic":"orders","data":{"n":4}}`))
	enginetest.Eventually(t, "the remaining subscriber", 10*time.Second, func() bool { return len(c.get("flaky::fn")) == 5 })
	if n := len(c.get("sub::d")); n != 3 {
		t.Errorf("the unregistered durable subscriber got %d messages, want 3", n)
	}
}
