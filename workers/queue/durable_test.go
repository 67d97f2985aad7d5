package queue

import "testing"

// durable:subscriber configs become the "queue" trigger's; what the queue cannot honour is
// refused.
func TestDurableConfig(t *testing.T) {
	for in, want := range map[string]string{
		`{"topic":"t"}`:                     `{"topic":"t"}`,
		`{"topic":"t","queue_config":null}`: `{"topic":"t"}`,
		`{"topic":"t","queue_config":{"maxRetries":5,"concurrency":2,"backoffDelayMs":200,"visibilityTimeout":3000,"backoffType":"exponential","type":"standard"}}`: `{"backoff_ms":200,"concurrency":2,"max_retries":5,"timeout_ms":3000,"topic":"t"}`,
		`{"topic":"t","queue_config":{"type":"fifo"}}`: `{"concurrency":1,"topic":"t"}`,
		`{"queue":"t","max_retries":1,"backoff_ms":5}`: `{"backoff_ms":5,"max_retries":1,"queue":"t"}`,
	} {
		got, err := durableConfig([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{
		`"t"`, `{"topic":"t","condition_function_id":"c"}`, `{"topic":"t","extra":1}`,
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
