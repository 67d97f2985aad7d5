// Package telemetry is the engine worker iii-observability (named for what it keeps, beside
// package observe, the observers of function calls): logs, traces and metrics kept
// in memory within bounds, queried through engine functions with iii's shapes, exported over
// OTLP/HTTP and to Prometheus.
//
// What it keeps comes from two places: the SDKs' telemetry frames (binary WebSocket frames of
// a 4-byte signal prefix, "OTLP" traces, "LOGS" logs, "MTRC" metrics, then an OTLP/JSON export
// request; sent on the worker connection or a telemetry-only /otel socket), and the engine
// itself: every invocation it routes is a span ("call <function>", with the serving worker,
// the function, its duration and its error), engine::log::* calls are logs, and the engine's
// own log lines are logs (Handler).
//
// Functions (iii's names and shapes):
//
//	engine::log::{info,warn,error,debug,trace}  {message, data?, trace_id?, span_id?, service_name?}
//	engine::logs::list    {start_time?, end_time?, trace_id?, span_id?, severity_min?, severity_text?, offset?, limit?} -> {logs, total, query, timestamp}
//	engine::logs::clear   -> {success}
//	engine::traces::list  {trace_id?, offset?, limit? (100), service_name?, name?, status?, min_duration_ms?, max_duration_ms?,
//	                       start_time?, end_time?, sort_by?, sort_order?, attributes?, include_internal?, search_all_spans?} -> {spans, total, offset, limit}
//	                       (one row per trace: its root span; engine::* traces only with include_internal)
//	engine::traces::tree  {trace_id} -> {roots: [span + children]}
//	engine::traces::clear -> {success}
//	engine::metrics::list {start_time?, end_time?, metric_name?} -> {engine_metrics: {invocations, workers, performance}, sdk_metrics, timestamp}
//	engine::health::check -> {status, components: {name: {status, details}}, timestamp, version}
//	engine::alerts::list, engine::sampling::rules, engine::rollups::list (console.go)
//
// Bounds: each store keeps at most a count and an estimated byte size of records (Config), the
// oldest dropped first; logs and metrics also expire after their retention.
package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
)

// Name is the worker's name, iii's.
const Name = "iii-observability"

// Function ids.
const (
	FnLogsList    = "engine::logs::list"
	FnLogsClear   = "engine::logs::clear"
	FnTracesList  = "engine::traces::list"
	FnTracesTree  = "engine::traces::tree"
	FnTracesClear = "engine::traces::clear"
	FnMetricsList = "engine::metrics::list"
	FnHealthCheck = "engine::health::check"
)

// Component is a part of the engine engine::health::check reports on.
type Component struct {
	Name  string
	Check func() (status string, details any)
}

// Worker is the iii-observability worker. It implements the StartCall and Telemetry parts of
// core.Observer, and discovery.MetricsSource.
type Worker struct {
	cfg     Config
	version string
	log     *slog.Logger
	console io.Writer
	e       *core.Engine

	spans   *ring[Span]
	logs    *ring[Log]
	metrics *ring[MetricPoint]

	mu         sync.Mutex
	latest     map[string]map[string]float64 // worker id -> SDK metric (metricKey) -> last value
	latestAt   map[string]time.Time
	byFunction map[string]uint64
	components []Component

	total, success, failed atomic.Uint64
	spawns                 atomic.Uint64
	ingestErrors           atomic.Uint64
	namesDropped           atomic.Uint64 // SDK metric names not kept by keepLatest

	// live reports whether a worker connection id is connected (nil: every id is, without an
	// engine).
	live func(id string) bool

	exp  *exporter   // nil unless exporter is otlp or both
	prom *promServer // nil unless metrics_exporter is prometheus
}

// New returns the worker for cfg; version is the engine's.
func New(cfg Config, version string, log *slog.Logger) *Worker {
	if log == nil {
		log = slog.Default()
	}
	w := &Worker{cfg: cfg, version: version, log: log, console: os.Stderr,
		spans:   newRing[Span](cfg.MemoryMaxSpans, cfg.MemoryMaxBytes, 0),
		logs:    newRing[Log](cfg.LogsMaxCount, cfg.LogsMaxBytes, time.Duration(cfg.LogsRetentionSeconds)*time.Second),
		metrics: newRing[MetricPoint](cfg.MetricsMaxCount, cfg.MetricsMaxBytes, time.Duration(cfg.MetricsRetentionSeconds)*time.Second),
		latest:  map[string]map[string]float64{}, latestAt: map[string]time.Time{}, byFunction: map[string]uint64{}}
	return w
}

// Config is the configuration the worker runs with.
func (w *Worker) Config() Config { return w.cfg }

// AddComponent adds a part of the engine to engine::health::check.
func (w *Worker) AddComponent(c Component) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.components = append(w.components, c)
}

// Install adds the worker's functions to e.
func (w *Worker) Install(e *core.Engine) {
	w.e = e
	w.live = func(id string) bool {
		select {
		case <-e.WorkerGone(id):
			return false
		default:
			return true
		}
	}
	for _, lvl := range []string{"info", "warn", "error", "debug", "trace"} {
		e.HandleInline("engine::log::"+lvl, "Log a "+lvl+" message: {message, data?, trace_id?, span_id?, service_name?}", w.logFn(lvl))
	}
	e.HandleInline(FnLogsList, "Query stored log entries", w.logsList)
	e.HandleInline(FnLogsClear, "Clear all stored log entries from memory", func(context.Context, core.Caller, json.RawMessage) (any, error) {
		w.logs.clear()
		return map[string]any{"success": true}, nil
	})
	e.HandleInline(FnTracesList, "List one root span per stored trace", w.tracesList)
	e.HandleInline(FnTracesTree, "Retrieve a trace as a span tree: {trace_id}", w.tracesTree)
	e.HandleInline(FnTracesClear, "Clear all stored trace spans from memory", func(context.Context, core.Caller, json.RawMessage) (any, error) {
		w.spans.clear()
		return map[string]any{"success": true}, nil
	})
	e.HandleInline(FnMetricsList, "List engine and SDK metrics", w.metricsList)
	e.HandleInline(FnHealthCheck, "Check engine health: status, components, timestamp, version", w.healthCheck)
	w.installConsole(e)
}

// Start starts the OTLP exporter and the Prometheus listener the configuration asks for; they
// stop when ctx ends (Stop waits for that).
func (w *Worker) Start(ctx context.Context) error {
	if !w.cfg.Enabled {
		return nil
	}
	if w.cfg.Exporter == "otlp" || w.cfg.Exporter == "both" {
		exp, err := newExporter(ctx, w.cfg, w.log)
		if err != nil {
			return err
		}
		w.exp = exp
	}
	if w.cfg.MetricsEnabled && w.cfg.MetricsExporter == "prometheus" {
		p, err := startProm(ctx, w)
		if err != nil {
			return err
		}
		w.prom = p
	}
	return nil
}

// Stop flushes the exporter and closes the Prometheus listener (after ctx of Start ended).
func (w *Worker) Stop() {
	if w.exp != nil {
		w.exp.stop()
	}
	if w.prom != nil {
		w.prom.stop()
	}
}

// keepSpans reports whether spans go to the memory store.
func (w *Worker) keepSpans() bool { return w.cfg.Exporter == "memory" || w.cfg.Exporter == "both" }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// parseTraceparent reads a W3C traceparent: version 00, 32 hex trace id, 16 hex span id, flags.
func parseTraceparent(tp string) (traceID, spanID string, sampled, ok bool) {
	parts := strings.Split(strings.TrimSpace(tp), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return "", "", false, false
	}
	if _, err := hex.DecodeString(parts[1] + parts[2] + parts[3]); err != nil || strings.Trim(parts[1], "0") == "" || strings.Trim(parts[2], "0") == "" {
		return "", "", false, false
	}
	flags, _ := hex.DecodeString(parts[3])
	return strings.ToLower(parts[1]), strings.ToLower(parts[2]), flags[0]&1 == 1, true
}

// sampledTrace decides a new trace by sampling_ratio, from its id.
func (w *Worker) sampledTrace(traceID string) bool {
	if w.cfg.SamplingRatio >= 1 {
		return true
	}
	b, _ := hex.DecodeString(traceID[16:])
	return float64(binary.BigEndian.Uint64(b)) < w.cfg.SamplingRatio*float64(^uint64(0))
}

// StartCall opens the engine's span of one invocation (core.Observer).
func (w *Worker) StartCall(c core.Call) (string, func(*protocol.Error)) {
	if !w.cfg.Enabled {
		return "", nil
	}
	traceID, parent, sampled, ok := parseTraceparent(c.Traceparent)
	if !ok {
		traceID, parent = randHex(16), ""
		sampled = w.sampledTrace(traceID)
	}
	spanID := randHex(8)
	flags := "00"
	if sampled {
		flags = "01"
	}
	tp := "00-" + traceID + "-" + spanID + "-" + flags
	var done atomic.Bool
	return tp, func(perr *protocol.Error) {
		if done.Swap(true) {
			return
		}
		end := time.Now()
		w.count(c.FunctionID, perr, end.Sub(c.Start))
		if !sampled {
			return
		}
		s := Span{TraceID: traceID, SpanID: spanID, Name: "call " + c.FunctionID, StartTimeUnixNano: uint64(c.Start.UnixNano()),
			EndTimeUnixNano: uint64(end.UnixNano()), Status: "ok", ServiceName: w.cfg.ServiceName, Events: []SpanEvent{}, Links: []SpanLink{},
			InstrumentationScopeName: "iii-engine", InstrumentationScopeVersion: w.version, Kind: 2,
			Attributes: [][2]string{{"iii.function.id", c.FunctionID}, {"iii.namespace", c.Namespace}, {"iii.worker.id", c.WorkerID},
				{"iii.worker.name", c.WorkerName}, {"iii.caller.id", c.CallerID}, {"iii.caller.name", c.CallerName},
				{"iii.duration_ms", fmt.Sprintf("%.3f", float64(end.Sub(c.Start).Microseconds())/1000)}}}
		if parent != "" {
			s.ParentSpanID = &parent
		}
		if perr != nil {
			s.Status, s.StatusDescription = "error", perr.Message
			s.Attributes = append(s.Attributes, [2]string{"error.code", perr.Code})
		}
		w.addSpan(s)
	}
}

// maxFunctions bounds the functions counted one by one (by_function, the Prometheus function
// label): calls of others count as otherFunctions, so callers naming random ids cannot grow them.
const (
	maxFunctions   = 4096
	otherFunctions = "(other)"
	// maxReporting bounds the workers whose last SDK metrics are kept.
	maxReporting = 4096
)

func (w *Worker) count(fn string, perr *protocol.Error, d time.Duration) {
	w.total.Add(1)
	if perr != nil {
		w.failed.Add(1)
	} else {
		w.success.Add(1)
	}
	w.mu.Lock()
	if _, ok := w.byFunction[fn]; !ok && len(w.byFunction) >= maxFunctions {
		fn = otherFunctions
	}
	w.byFunction[fn]++
	w.mu.Unlock()
	if w.prom != nil {
		w.prom.observe(fn, perr, d) // fn is otherFunctions past maxFunctions
	}
}

func (w *Worker) addSpan(s Span) {
	if w.keepSpans() {
		w.spans.add(s, s.size(), time.Now())
	}
	if w.exp != nil {
		w.exp.push(s)
	}
}

// WorkerRegistered counts a worker's registration (workers.spawns of engine::metrics::list).
func (w *Worker) WorkerRegistered(string) { w.spawns.Add(1) }
