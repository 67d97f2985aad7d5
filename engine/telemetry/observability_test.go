package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
)

func quiet(cfg Config) *Worker {
	w := New(cfg, "test", nil)
	w.console = io.Discard
	return w
}

func call(t *testing.T, fn core.Builtin, in any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(in)
	out, err := fn(context.Background(), core.Caller{WorkerID: "w1", Name: "tester"}, b)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(out)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m
}

func TestRingBounds(t *testing.T) {
	r := newRing[int](3, 100, 0)
	now := time.Now()
	for i := range 5 {
		r.add(i, 10, now)
	}
	if got := r.snapshot(now); fmt.Sprint(got) != "[2 3 4]" {
		t.Errorf("count bound: %v", got)
	}
	r.add(5, 90, now) // 3 kept would be 110 bytes: the oldest go
	if got := r.snapshot(now); fmt.Sprint(got) != "[4 5]" {
		t.Errorf("byte bound: %v", got)
	}
	r.add(6, 101, now) // larger than the bound: not kept
	if n, b, d := r.stats(); n != 2 || b != 100 || d != 5 {
		t.Errorf("stats = %d %d %d", n, b, d)
	}
	aged := newRing[int](10, 1000, time.Minute)
	aged.add(1, 1, now.Add(-2*time.Minute))
	aged.add(2, 1, now)
	if got := aged.snapshot(now); fmt.Sprint(got) != "[2]" {
		t.Errorf("retention: %v", got)
	}
}

func heapMB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

func rssMB() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

// TestLogsBound writes 100,000 logs of about 300 bytes each: with a count bound above that, the
// byte bound (logs_max_bytes, 8 MiB) holds, and the heap the store keeps stays within 1.5 times it.
func TestLogsBound(t *testing.T) {
	cfg := DefaultConfig("test")
	cfg.LogsMaxCount = 1_000_000
	w := quiet(cfg)
	before, rssBefore := heapMB(), rssMB()
	log := w.logFn("info")
	msg := strings.Repeat("x", 200)
	for i := range 100_000 {
		b, _ := json.Marshal(map[string]any{"message": msg, "data": map[string]any{"n": i}})
		if _, err := log(context.Background(), core.Caller{WorkerID: "w", Name: "bench"}, b); err != nil {
			t.Fatal(err)
		}
	}
	after, rssAfter := heapMB(), rssMB()
	n, bytes, dropped := w.logs.stats()
	t.Logf("100000 logs: kept %d (%d estimated bytes, %d dropped); heap %.1f -> %.1f MiB (+%.1f); RSS %.1f -> %.1f MiB; bound %d MiB",
		n, bytes, dropped, before, after, after-before, rssBefore, rssAfter, cfg.LogsMaxBytes>>20)
	if bytes > cfg.LogsMaxBytes || n+int(dropped) != 100_000 || dropped == 0 {
		t.Fatalf("store kept %d logs, %d bytes (bound %d), dropped %d", n, bytes, cfg.LogsMaxBytes, dropped)
	}
	if grown := after - before; grown > 1.5*float64(cfg.LogsMaxBytes>>20) {
		t.Errorf("heap grew %.1f MiB, more than 1.5 times the %d MiB bound", grown, cfg.LogsMaxBytes>>20)
	}
	runtime.KeepAlive(w)

	// The default count bound (logs_max_count 1000) keeps the newest 1000.
	d := quiet(DefaultConfig("test"))
	for i := range 100_000 {
		d.addLog(Log{SeverityNumber: 9, SeverityText: "INFO", Body: "line " + strconv.Itoa(i)})
	}
	got := call(t, d.logsList, map[string]any{"limit": 1})
	if got["total"] != 1000.0 || got["logs"].([]any)[0].(map[string]any)["body"] != "line 99999" {
		t.Errorf("default bound: total %v, newest %v", got["total"], got["logs"])
	}
}

func TestTraceTreeOfAChain(t *testing.T) {
	w := quiet(DefaultConfig("test"))
	// A calls B, B calls C: each call carries the traceparent the engine forwarded to its caller.
	tpA, endA := w.StartCall(core.Call{FunctionID: "a::run", WorkerID: "wa", WorkerName: "A", Start: time.Now()})
	tpB, endB := w.StartCall(core.Call{FunctionID: "b::run", WorkerID: "wb", WorkerName: "B", Traceparent: tpA, Start: time.Now()})
	tpC, endC := w.StartCall(core.Call{FunctionID: "c::run", WorkerID: "wc", WorkerName: "C", Traceparent: tpB, Start: time.Now()})
	endC(protocol.NewError("invocation_failed", "c broke"))
	endB(nil)
	endA(nil)
	trace, _, _, _ := parseTraceparent(tpC)
	tree := call(t, w.tracesTree, map[string]any{"trace_id": trace})
	roots := tree["roots"].([]any)
	if len(roots) != 1 {
		t.Fatalf("roots = %v", roots)
	}
	a := roots[0].(map[string]any)
	b := a["children"].([]any)[0].(map[string]any)
	c := b["children"].([]any)[0].(map[string]any)
	if a["name"] != "call a::run" || b["name"] != "call b::run" || c["name"] != "call c::run" || c["status"] != "error" || c["status_description"] != "c broke" {
		t.Errorf("tree = %v", tree)
	}
	list := call(t, w.tracesList, map[string]any{})
	if list["total"] != 1.0 || list["spans"].([]any)[0].(map[string]any)["name"] != "call a::run" {
		t.Errorf("list = %v", list)
	}
	m := call(t, w.metricsList, nil)
	inv := m["engine_metrics"].(map[string]any)["invocations"].(map[string]any)
	if inv["total"] != 3.0 || inv["error"] != 1.0 {
		t.Errorf("invocations = %v", inv)
	}
}

// An OTLP/JSON logs export as iii-sdk's exporter writes it.
const sdkLogs = `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"node-worker"}}]},
"scopeLogs":[{"scope":{"name":"iii-node"},"logRecords":[{"timeUnixNano":"1733000000000000000","observedTimeUnixNano":"1733000000000000001",
"severityNumber":13,"severityText":"WARN","body":{"stringValue":"disk low"},"attributes":[{"key":"free","value":{"intValue":5}}],
"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331"}]}]}]}`

const sdkMetrics = `{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"node-worker"}}]},
"scopeMetrics":[{"metrics":[{"name":"iii.worker.cpu.percent","unit":"%","gauge":{"dataPoints":[{"attributes":[{"key":"worker.id","value":{"stringValue":"w-1"}}],
"timeUnixNano":"1733000000000000000","asDouble":3.5}]}},{"name":"iii.worker.memory.rss","gauge":{"dataPoints":[{"attributes":[{"key":"worker.id","value":{"stringValue":"w-1"}}],
"timeUnixNano":"1733000000000000000","asInt":"123456"}]}}]}]}]}`

func TestTelemetryFrames(t *testing.T) {
	w := quiet(DefaultConfig("test"))
	w.Telemetry("", "LOGS", []byte(sdkLogs))
	w.Telemetry("", "MTRC", []byte(sdkMetrics))
	w.Telemetry("", "OTLP", []byte(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"node-worker"}}]},
"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"execute x","startTimeUnixNano":"1","endTimeUnixNano":"2000001","status":{"code":0}}]}]}]}`))
	w.Telemetry("", "LOGS", []byte(`not json`))
	logs := call(t, w.logsList, map[string]any{"severity_min": 13})
	l := logs["logs"].([]any)[0].(map[string]any)
	if logs["total"] != 1.0 || l["body"] != "disk low" || l["service_name"] != "node-worker" || l["trace_id"] != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("logs = %v", logs)
	}
	m, _ := json.Marshal(w.WorkerMetrics("w-1"))
	if !bytes.Contains(m, []byte(`"cpu_percent":3.5`)) || !bytes.Contains(m, []byte(`"memory_rss":123456`)) {
		t.Errorf("worker metrics = %s", m)
	}
	list := call(t, w.tracesList, map[string]any{"trace_id": "0af7651916cd43dd8448eb211c80319c"})
	if list["total"] != 1.0 {
		t.Errorf("traces = %v", list)
	}
	if w.ingestErrors.Load() != 1 {
		t.Errorf("ingest errors = %d", w.ingestErrors.Load())
	}
}

func TestParseConfig(t *testing.T) {
	base := DefaultConfig("1")
	c, err := ParseConfig(base, map[string]any{"exporter": "both", "endpoint": "http://127.0.0.1:4318", "logs_max_count": 5.0, "metrics_exporter": "prometheus", "prometheus_port": 9999.0})
	if err != nil || c.Exporter != "both" || c.LogsMaxCount != 5 || c.PrometheusPort != 9999 {
		t.Fatalf("%+v %v", c, err)
	}
	for in, code := range map[string]string{`{"nope":1}`: "CONFIG_INVALID", `{"alerts":[]}`: "CONFIG_UNSUPPORTED", `{"sampling_ratio":2}`: "CONFIG_INVALID",
		`{"endpoint":"localhost:4317"}`: "CONFIG_INVALID", `{"metrics_exporter":"otlp"}`: "CONFIG_UNSUPPORTED"} {
		var m map[string]any
		_ = json.Unmarshal([]byte(in), &m)
		if _, err := ParseConfig(base, m); err == nil || !strings.Contains(fmt.Sprintf("%#v", err), code) {
			t.Errorf("%s: err %v, want %s", in, err, code)
		}
	}
}

// TestSpansBound records 100,000 engine spans with an 8 MiB span bound: the store keeps its
// bytes within it, and the heap it holds within 1.5 times it.
func TestSpansBound(t *testing.T) {
	cfg := DefaultConfig("test")
	cfg.MemoryMaxBytes = 8 << 20
	w := quiet(cfg)
	before := heapMB()
	for i := range 100_000 {
		_, end := w.StartCall(core.Call{FunctionID: "svc::fn" + strconv.Itoa(i%50), WorkerID: "w", WorkerName: "svc", Start: time.Now()})
		end(nil)
	}
	after := heapMB()
	n, b, d := w.spans.stats()
	t.Logf("100000 spans: kept %d (%d estimated bytes, %d dropped); heap %.1f -> %.1f MiB (+%.1f); bound %d MiB", n, b, d, before, after, after-before, cfg.MemoryMaxBytes>>20)
	if b > cfg.MemoryMaxBytes || d == 0 {
		t.Fatalf("kept %d spans, %d bytes, dropped %d", n, b, d)
	}
	if grown := after - before; grown > 1.5*float64(cfg.MemoryMaxBytes>>20) {
		t.Errorf("heap grew %.1f MiB, more than 1.5 times the %d MiB bound", grown, cfg.MemoryMaxBytes>>20)
	}
	runtime.KeepAlive(w)
}

// BenchmarkStartCall is the cost the worker adds to one routed invocation: its span, counters
// and store insert.
func BenchmarkStartCall(b *testing.B) {
	w := quiet(DefaultConfig("test"))
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	b.ReportAllocs()
	for b.Loop() {
		_, end := w.StartCall(core.Call{FunctionID: "svc::fn", WorkerID: "w", WorkerName: "svc", Traceparent: tp, Start: time.Now()})
		end(nil)
	}
}
