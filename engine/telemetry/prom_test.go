package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// metricsFrame is an OTLP/JSON metrics export of one gauge point per name, each with the
// attributes attrs, as an SDK's exporter writes it.
func metricsFrame(attrs map[string]string, names ...string) []byte {
	var kvs []map[string]any
	for k, v := range attrs {
		kvs = append(kvs, map[string]any{"key": k, "value": map[string]any{"stringValue": v}})
	}
	var ms []map[string]any
	for i, n := range names {
		ms = append(ms, map[string]any{"name": n, "gauge": map[string]any{"dataPoints": []map[string]any{
			{"attributes": kvs, "timeUnixNano": "1733000000000000000", "asDouble": float64(i + 1)}}}})
	}
	b, _ := json.Marshal(map[string]any{"resourceMetrics": []map[string]any{{"scopeMetrics": []map[string]any{{"metrics": ms}}}}})
	return b
}

// promWorker is a worker serving /metrics on a free loopback port until the test ends.
func promWorker(t *testing.T) (*Worker, string) {
	t.Helper()
	cfg := DefaultConfig("test")
	cfg.MetricsExporter, cfg.PrometheusHost, cfg.PrometheusPort = "prometheus", "127.0.0.1", 0
	w := quiet(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); w.Stop() })
	return w, "http://" + w.prom.addr + "/metrics"
}

func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// Two names one worker reports that are alike once sanitised for Prometheus are one metric, and
// a name with characters Prometheus has no place for is not kept: every scrape answers 200.
func TestPrometheusCollidingNames(t *testing.T) {
	w, url := promWorker(t)
	w.Telemetry("conn-1", "MTRC", metricsFrame(nil, "iii.worker.cpu.percent", "iii.worker.cpu_percent", "iii.worker.cpu-percent", "iii.worker.memory.rss"))
	for range 2 {
		code, body := scrape(t, url)
		if code != http.StatusOK {
			t.Fatalf("GET /metrics: %d\n%s", code, body)
		}
		if n := strings.Count(body, "\niii_worker_cpu_percent{"); n != 1 {
			t.Errorf("iii_worker_cpu_percent appears %d times, want 1:\n%s", n, body)
		}
		if !strings.Contains(body, `iii_worker_cpu_percent{worker_id="conn-1"} 2`+"\n") || !strings.Contains(body, `iii_worker_memory_rss{worker_id="conn-1"} 4`+"\n") {
			t.Errorf("the worker's metrics are missing:\n%s", body)
		}
	}
}

// One worker may report at most maxWorkerMetricNames iii.worker.* names; the rest, and a name
// that is not one, are dropped and counted, and a scrape serves only the kept ones. Other
// names (an app's own metrics) stay in the metric store only.
func TestWorkerMetricNamesBounded(t *testing.T) {
	w, url := promWorker(t)
	var names []string
	for i := range 1000 {
		names = append(names, fmt.Sprintf("iii.worker.made_up_%d", i))
	}
	w.Telemetry("conn-1", "MTRC", metricsFrame(nil, names...))
	w.Telemetry("conn-1", "MTRC", metricsFrame(nil, "app.requests", "iii.worker."))
	w.mu.Lock()
	kept := len(w.latest["conn-1"])
	w.mu.Unlock()
	if kept != 64 {
		t.Errorf("kept %d names of one worker, want 64", kept)
	}
	code, body := scrape(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	if n := len(regexp.MustCompile(`(?m)^iii_worker_made_up_`).FindAllString(body, -1)); n != 64 {
		t.Errorf("/metrics serves %d made-up names, want 64", n)
	}
	if !strings.Contains(body, "\niii_sdk_metric_names_dropped 937\n") {
		t.Errorf("/metrics does not count the 937 dropped names:\n%s", body[:min(len(body), 2000)])
	}
	// The names a worker already reports keep being updated past the bound.
	w.Telemetry("conn-1", "MTRC", metricsFrame(nil, "iii.worker.made_up_0"))
	if m, _ := json.Marshal(w.WorkerMetrics("conn-1")); !strings.Contains(string(m), `"made_up_0":1`) {
		t.Errorf("worker metrics = %s", m)
	}
}

// A frame on a worker connection is about that connection, whatever worker.id it carries: it
// cannot write another worker's metrics.
func TestWorkerIDFromConnection(t *testing.T) {
	w := quiet(DefaultConfig("test"))
	w.Telemetry("conn-1", "MTRC", metricsFrame(map[string]string{"worker.id": "victim"}, "iii.worker.cpu.percent"))
	if m := w.WorkerMetrics("victim"); m != nil {
		t.Errorf("a frame of conn-1 naming worker.id victim set victim's metrics: %v", m)
	}
	if m, _ := json.Marshal(w.WorkerMetrics("conn-1")); !strings.Contains(string(m), `"cpu_percent":1`) {
		t.Errorf("conn-1's metrics = %s", m)
	}
}
