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
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
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

// Telemetry ingests one SDK telemetry frame (core.Observer).
func (w *Worker) Telemetry(workerID, signal string, body []byte) {
	if !w.cfg.Enabled {
		return
	}
	var err error
	switch signal {
	case "OTLP":
		var spans []Span
		if spans, err = parseTraces(body); err == nil {
			for _, s := range spans {
				w.addSpan(s)
			}
		}
	case "LOGS":
		if !w.cfg.LogsEnabled {
			return
		}
		var logs []Log
		if logs, err = parseLogs(body); err == nil {
			for _, l := range logs {
				l.WorkerID = workerID
				w.addLog(l)
			}
		}
	case "MTRC":
		if !w.cfg.MetricsEnabled {
			return
		}
		var pts []MetricPoint
		if pts, err = parseMetrics(body); err == nil {
			now := time.Now()
			for _, p := range pts {
				p.WorkerID = w.reporter(workerID, p.Attributes)
				w.metrics.add(p, p.size(), now)
				if p.WorkerID != "" && strings.HasPrefix(p.Name, workerMetricPrefix) {
					w.keepLatest(p.WorkerID, p.Name, p.Value, now)
				}
			}
		}
	}
	if err != nil {
		w.ingestErrors.Add(1)
		w.log.Debug("telemetry frame not understood", "signal", signal, "worker_id", workerID, "err", err)
	}
}

// Bounds of the last SDK metrics kept per worker (engine::workers::info's latest_metrics and
// /metrics): only the SDKs' iii.worker.* names are kept there; one of other characters, or past
// maxWorkerMetricNames, is dropped and counted (namesDropped), so a worker cannot grow the
// engine's memory or a scrape with made-up names.
// iii-sdk 0.22.1's Node SDK reports nine names, the Python and Rust SDKs fewer than twenty.
const (
	workerMetricPrefix   = "iii.worker."
	maxWorkerMetricNames = 64
	maxWorkerMetricLen   = 128
)

// reporter is the worker a metric point is about. On a worker connection it is that connection,
// whatever the point's worker.id attribute says. A telemetry-only /otel socket (workerID "", how
// iii-sdk sends its telemetry) has no worker of its own: the SDK names its worker in worker.id,
// which is taken only when it is a connected worker, so made-up ids are not kept.
func (w *Worker) reporter(workerID string, attrs map[string]any) string {
	if workerID != "" {
		return workerID
	}
	id, _ := attrs["worker.id"].(string)
	if id == "" || w.live != nil && !w.live(id) {
		return ""
	}
	return id
}

// metricKey is the Prometheus name of an SDK metric name, "" when the name is not one the SDKs
// use: iii.worker. followed by letters, digits, '_' and '.'. Dots become '_', so names that
// differ only there (iii.worker.cpu.percent, iii.worker.cpu_percent) are one metric: the last
// value reported wins, and /metrics never sees the same name twice for one worker.
func metricKey(name string) string {
	if !strings.HasPrefix(name, workerMetricPrefix) || len(name) == len(workerMetricPrefix) || len(name) > maxWorkerMetricLen {
		return ""
	}
	b := []byte(name)
	for i, c := range b {
		switch {
		case c == '.':
			b[i] = '_'
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			return ""
		}
	}
	return string(b)
}

// keepLatest records v as the last value of the SDK metric name of worker id, within the bounds
// above.
func (w *Worker) keepLatest(id, name string, v float64, now time.Time) {
	key := metricKey(name)
	if key == "" {
		w.namesDropped.Add(1)
		return
	}
	if w.reportingFull(id) {
		w.pruneReporting()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.latest[id]
	if m == nil {
		m = map[string]float64{}
		w.latest[id] = m
	}
	if _, known := m[key]; !known && len(m) >= maxWorkerMetricNames {
		w.namesDropped.Add(1)
		return
	}
	m[key] = v
	w.latestAt[id] = now
}

// WorkerMetrics is the last CPU, memory and event-loop report of a worker's SDK, with iii's
// WorkerMetrics keys (memory_rss, cpu_percent, event_loop_lag_ms, ...; timestamp_ms), or nil.
func (w *Worker) WorkerMetrics(workerID string) any {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.latest[workerID]
	if m == nil {
		return nil
	}
	out := map[string]any{"timestamp_ms": w.latestAt[workerID].UnixMilli()}
	for k, v := range m {
		out[strings.TrimPrefix(k, "iii_worker_")] = v
	}
	return out
}

// reportingFull reports whether a first report of id would pass maxReporting.
func (w *Worker) reportingFull(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, known := w.latest[id]
	return !known && len(w.latest) >= maxReporting
}

// pruneReporting forgets the last metrics of workers no longer connected and, if that is not
// enough, of the one that reported longest ago.
func (w *Worker) pruneReporting() {
	live := map[string]bool{}
	if w.e != nil {
		for _, r := range w.e.Workers() {
			live[r.ID] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.latest {
		if !live[id] {
			delete(w.latest, id)
			delete(w.latestAt, id)
		}
	}
	for len(w.latest) >= maxReporting {
		oldest := ""
		for id, at := range w.latestAt {
			if oldest == "" || at.Before(w.latestAt[oldest]) {
				oldest = id
			}
		}
		delete(w.latest, oldest)
		delete(w.latestAt, oldest)
	}
}

// addLog keeps l when logs are on and it passes the level and the sampling ratio; with
// logs_console_output it is printed too.
func (w *Worker) addLog(l Log) {
	if !w.cfg.Enabled || !w.cfg.LogsEnabled || l.SeverityNumber != 0 && l.SeverityNumber < severities[w.cfg.Level] {
		return
	}
	if w.cfg.LogsSamplingRatio < 1 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		if float64(binary.BigEndian.Uint64(b[:])) >= w.cfg.LogsSamplingRatio*float64(^uint64(0)) {
			return
		}
	}
	now := time.Now()
	if l.ObservedTimestampUnixNano == 0 {
		l.ObservedTimestampUnixNano = uint64(now.UnixNano())
	}
	if l.TimestampUnixNano == 0 {
		l.TimestampUnixNano = l.ObservedTimestampUnixNano
	}
	if l.Attributes == nil {
		l.Attributes = map[string]any{}
	}
	if l.Resource == nil {
		l.Resource = map[string]any{}
	}
	w.logs.add(l, l.size(), now)
	if w.cfg.LogsConsoleOutput && l.InstrumentationScopeName != engineLogScope {
		w.printLog(l)
	}
}

func (w *Worker) printLog(l Log) {
	if w.cfg.Format == "json" {
		b, _ := json.Marshal(l)
		fmt.Fprintf(w.console, "%s\n", b)
		return
	}
	fmt.Fprintf(w.console, "%s %-5s [%s] %s\n", time.Unix(0, int64(l.TimestampUnixNano)).UTC().Format(time.RFC3339Nano), l.SeverityText, l.ServiceName, l.Body)
}

// logFn serves engine::log::<level>.
func (w *Worker) logFn(level string) core.Builtin {
	return func(ctx context.Context, c core.Caller, payload json.RawMessage) (any, error) {
		var in struct {
			Message     *string        `json:"message"`
			Data        map[string]any `json:"data"`
			TraceID     string         `json:"trace_id"`
			SpanID      string         `json:"span_id"`
			ServiceName string         `json:"service_name"`
		}
		if err := json.Unmarshal(payload, &in); err != nil || in.Message == nil {
			msg := "missing field `message`"
			if err != nil {
				msg = err.Error()
			}
			return nil, protocol.NewError(errcode.InvalidArguments, "engine::log::%s takes {message, data?, trace_id?, span_id?, service_name?}: %s", level, msg)
		}
		l := Log{SeverityNumber: severities[level], SeverityText: strings.ToUpper(level), Body: *in.Message, Attributes: in.Data,
			TraceID: in.TraceID, SpanID: in.SpanID, ServiceName: in.ServiceName, InstrumentationScopeName: "engine::log", WorkerID: c.WorkerID}
		if l.ServiceName == "" {
			l.ServiceName = c.Name
		}
		if l.TraceID == "" {
			tp, _ := core.TraceFromContext(ctx)
			if t, s, _, ok := parseTraceparent(tp); ok {
				l.TraceID, l.SpanID = t, s
			}
		}
		w.addLog(l)
		return nil, nil
	}
}

func (w *Worker) logsList(_ context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		StartTime    *uint64 `json:"start_time"`
		EndTime      *uint64 `json:"end_time"`
		TraceID      *string `json:"trace_id"`
		SpanID       *string `json:"span_id"`
		SeverityMin  *int    `json:"severity_min"`
		SeverityText *string `json:"severity_text"`
		Offset       *int    `json:"offset"`
		Limit        *int    `json:"limit"`
	}
	if err := decodeArgs(payload, &in, FnLogsList); err != nil {
		return nil, err
	}
	all := w.logs.snapshot(time.Now())
	out := []Log{}
	for i := len(all) - 1; i >= 0; i-- { // newest first
		l := all[i]
		ms := l.TimestampUnixNano / 1e6
		if in.StartTime != nil && ms < *in.StartTime || in.EndTime != nil && ms > *in.EndTime ||
			in.TraceID != nil && l.TraceID != *in.TraceID || in.SpanID != nil && l.SpanID != *in.SpanID ||
			in.SeverityMin != nil && l.SeverityNumber < *in.SeverityMin ||
			in.SeverityText != nil && !strings.EqualFold(l.SeverityText, *in.SeverityText) {
			continue
		}
		out = append(out, l)
	}
	total := len(out)
	out = page(out, in.Offset, in.Limit, len(out))
	return map[string]any{"logs": out, "total": total, "timestamp": time.Now().UnixMilli(),
		"query": map[string]any{"trace_id": in.TraceID, "span_id": in.SpanID, "severity_min": in.SeverityMin, "severity_text": in.SeverityText,
			"start_time": in.StartTime, "end_time": in.EndTime, "offset": in.Offset, "limit": in.Limit}}, nil
}

func page[T any](rows []T, offset, limit *int, def int) []T {
	o, n := 0, def
	if offset != nil && *offset > 0 {
		o = *offset
	}
	if limit != nil && *limit >= 0 {
		n = *limit
	}
	if o >= len(rows) {
		return []T{}
	}
	rows = rows[o:]
	if n < len(rows) {
		rows = rows[:n]
	}
	return rows
}

func decodeArgs(payload json.RawMessage, v any, fn string) error {
	if len(payload) == 0 || string(payload) == "null" {
		return nil
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return protocol.NewError(errcode.InvalidArguments, "%s: %v", fn, err)
	}
	return nil
}

func durationMS(s *Span) float64 {
	if s.EndTimeUnixNano < s.StartTimeUnixNano {
		return 0
	}
	return float64(s.EndTimeUnixNano-s.StartTimeUnixNano) / 1e6
}

// internal reports whether s is an engine span of an engine::* function.
func internal(s *Span) bool { return strings.HasPrefix(s.Attr("iii.function.id"), "engine::") }

// tracesQuery is the payload of engine::traces::list.
type tracesQuery struct {
	TraceID         *string    `json:"trace_id"`
	TraceIDs        []string   `json:"trace_ids"`
	Offset          *int       `json:"offset"`
	Limit           *int       `json:"limit"`
	ServiceName     *string    `json:"service_name"`
	Name            *string    `json:"name"`
	Status          *string    `json:"status"`
	MinDurationMS   *float64   `json:"min_duration_ms"`
	MaxDurationMS   *float64   `json:"max_duration_ms"`
	StartTime       *uint64    `json:"start_time"`
	EndTime         *uint64    `json:"end_time"`
	SortBy          string     `json:"sort_by"`
	SortOrder       string     `json:"sort_order"`
	Attributes      [][]string `json:"attributes"`
	IncludeInternal bool       `json:"include_internal"`
	SearchAllSpans  bool       `json:"search_all_spans"`
}

func (w *Worker) tracesList(_ context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
	var in tracesQuery
	if err := decodeArgs(payload, &in, FnTracesList); err != nil {
		return nil, err
	}
	for _, a := range in.Attributes {
		if len(a) != 2 {
			return nil, protocol.NewError(errcode.InvalidArguments, "%s: attributes must be [key, value] pairs", FnTracesList)
		}
	}
	byTrace := map[string][]*Span{}
	all := w.spans.snapshot(time.Now())
	for i := range all {
		byTrace[all[i].TraceID] = append(byTrace[all[i].TraceID], &all[i])
	}
	rows := []Span{}
	for id, spans := range byTrace {
		if root, ok := in.match(id, spans); ok {
			rows = append(rows, *root)
		}
	}
	sortTraces(rows, in.SortBy, in.SortOrder)
	total := len(rows)
	offset, limit := 0, 100
	if in.Offset != nil && *in.Offset > 0 {
		offset = *in.Offset
	}
	if in.Limit != nil && *in.Limit >= 0 {
		limit = *in.Limit
	}
	return map[string]any{"spans": page(rows, &offset, &limit, limit), "total": total, "offset": offset, "limit": limit}, nil
}

// match returns the root span of the trace id, of which spans are the spans, and whether the
// trace passes every filter of q.
func (q *tracesQuery) match(id string, spans []*Span) (*Span, bool) {
	contains := func(have, want string) bool { return strings.Contains(strings.ToLower(have), strings.ToLower(want)) }
	if q.TraceID != nil && id != *q.TraceID || q.TraceID == nil && len(q.TraceIDs) > 0 && !containsStr(q.TraceIDs, id) {
		return nil, false
	}
	root := rootOf(spans)
	if !q.IncludeInternal && internal(root) {
		return nil, false
	}
	if q.Name != nil {
		match := contains(root.Name, *q.Name)
		if !match && q.SearchAllSpans {
			for _, s := range spans {
				match = match || contains(s.Name, *q.Name)
			}
		}
		if !match {
			return nil, false
		}
	}
	d := durationMS(root)
	startMS, endMS := root.StartTimeUnixNano/1e6, root.EndTimeUnixNano/1e6
	if q.ServiceName != nil && !contains(root.ServiceName, *q.ServiceName) || q.Status != nil && !contains(root.Status, *q.Status) ||
		q.MinDurationMS != nil && d < *q.MinDurationMS || q.MaxDurationMS != nil && d > *q.MaxDurationMS ||
		q.StartTime != nil && endMS < *q.StartTime || q.EndTime != nil && startMS > *q.EndTime {
		return nil, false
	}
	ok := true
	for _, a := range q.Attributes {
		ok = ok && root.Attr(a[0]) == a[1]
	}
	return root, ok
}

// sortTraces sorts the root spans rows, stably, by sortBy (start time unless duration,
// service_name or name), descending when order is desc.
func sortTraces(rows []Span, sortBy, order string) {
	less := func(a, b *Span) bool { return a.StartTimeUnixNano < b.StartTimeUnixNano }
	switch sortBy {
	case "duration", "duration_ms":
		less = func(a, b *Span) bool { return durationMS(a) < durationMS(b) }
	case "service_name":
		less = func(a, b *Span) bool { return a.ServiceName < b.ServiceName }
	case "name":
		less = func(a, b *Span) bool { return a.Name < b.Name }
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if order == "desc" {
			return less(&rows[j], &rows[i])
		}
		return less(&rows[i], &rows[j])
	})
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// rootOf is a trace's root: the earliest span whose parent is not stored.
func rootOf(spans []*Span) *Span {
	ids := make(map[string]bool, len(spans))
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	var root *Span
	for _, s := range spans {
		top := s.ParentSpanID == nil || !ids[*s.ParentSpanID]
		if top && (root == nil || s.StartTimeUnixNano < root.StartTimeUnixNano) {
			root = s
		}
	}
	if root == nil {
		root = spans[0]
	}
	return root
}

// treeNode is a span with its children, as iii's SpanTreeNode (the span's fields flattened).
type treeNode struct {
	Span
	Children []*treeNode `json:"children"`
}

func (w *Worker) tracesTree(_ context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		TraceID string `json:"trace_id"`
	}
	if err := decodeArgs(payload, &in, FnTracesTree); err != nil {
		return nil, err
	}
	if in.TraceID == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {trace_id}: missing field `trace_id`", FnTracesTree)
	}
	nodes := map[string]*treeNode{}
	var order []*treeNode
	for _, s := range w.spans.snapshot(time.Now()) {
		if s.TraceID == in.TraceID {
			n := &treeNode{Span: s, Children: []*treeNode{}}
			nodes[s.SpanID] = n
			order = append(order, n)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].StartTimeUnixNano < order[j].StartTimeUnixNano })
	roots := []*treeNode{}
	for _, n := range order {
		if n.ParentSpanID != nil && nodes[*n.ParentSpanID] != nil && nodes[*n.ParentSpanID] != n {
			p := nodes[*n.ParentSpanID]
			p.Children = append(p.Children, n)
			continue
		}
		roots = append(roots, n)
	}
	return map[string]any{"roots": roots}, nil
}

func (w *Worker) metricsList(_ context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		StartTime         *uint64 `json:"start_time"`
		EndTime           *uint64 `json:"end_time"`
		MetricName        *string `json:"metric_name"`
		AggregateInterval *uint64 `json:"aggregate_interval"`
	}
	if err := decodeArgs(payload, &in, FnMetricsList); err != nil {
		return nil, err
	}
	if in.AggregateInterval != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s: aggregate_interval (time-bucketed aggregates) is not supported by this engine; omit it for the stored points", FnMetricsList)
	}
	sdk := []MetricPoint{}
	for _, p := range w.metrics.snapshot(time.Now()) {
		ms := p.TimestampUnixNano / 1e6
		if in.StartTime != nil && ms < *in.StartTime || in.EndTime != nil && ms > *in.EndTime || in.MetricName != nil && p.Name != *in.MetricName {
			continue
		}
		sdk = append(sdk, p)
	}
	w.mu.Lock()
	byFn := make(map[string]uint64, len(w.byFunction))
	for k, v := range w.byFunction {
		byFn[k] = v
	}
	w.mu.Unlock()
	active := 0
	if w.e != nil {
		active = len(w.e.Workers())
	}
	spawns := w.spawns.Load()
	deaths := uint64(0)
	if spawns > uint64(active) {
		deaths = spawns - uint64(active)
	}
	out := map[string]any{
		"engine_metrics": map[string]any{
			"invocations": map[string]any{"total": w.total.Load(), "success": w.success.Load(), "error": w.failed.Load(), "deferred": 0, "by_function": byFn},
			"workers":     map[string]any{"spawns": spawns, "deaths": deaths, "active": active},
			"performance": w.performance(),
		},
		"sdk_metrics": sdk,
		"timestamp":   time.Now().UnixMilli(),
	}
	if in.StartTime != nil || in.EndTime != nil || in.MetricName != nil {
		out["query"] = map[string]any{"start_time": in.StartTime, "end_time": in.EndTime, "aggregate_interval": nil, "metric_name": in.MetricName}
	}
	return out, nil
}

// performance is the duration statistics of the stored spans, as iii's.
func (w *Worker) performance() map[string]float64 {
	spans := w.spans.snapshot(time.Now())
	d := make([]float64, 0, len(spans))
	for i := range spans {
		d = append(d, durationMS(&spans[i]))
	}
	out := map[string]float64{"avg_duration_ms": 0, "p50_duration_ms": 0, "p95_duration_ms": 0, "p99_duration_ms": 0, "min_duration_ms": 0, "max_duration_ms": 0}
	if len(d) == 0 {
		return out
	}
	sort.Float64s(d)
	sum := 0.0
	for _, v := range d {
		sum += v
	}
	at := func(q float64) float64 { return d[min(int(float64(len(d))*q), len(d)-1)] }
	out["avg_duration_ms"], out["min_duration_ms"], out["max_duration_ms"] = sum/float64(len(d)), d[0], d[len(d)-1]
	out["p50_duration_ms"], out["p95_duration_ms"], out["p99_duration_ms"] = at(0.5), at(0.95), at(0.99)
	return out
}

type health struct {
	Status  string `json:"status"`
	Details any    `json:"details"`
}

func (w *Worker) healthCheck(context.Context, core.Caller, json.RawMessage) (any, error) {
	status := func(on bool) string {
		if on && w.cfg.Enabled {
			return "healthy"
		}
		return "disabled"
	}
	sc, sb, sd := w.spans.stats()
	lc, lb, ld := w.logs.stats()
	mc, mb, md := w.metrics.stats()
	comps := map[string]health{
		"otel": {status(true), map[string]any{"service_name": w.cfg.ServiceName, "exporter": w.cfg.Exporter, "endpoint": w.endpointDetail(),
			"ingest_errors": w.ingestErrors.Load(), "export": w.exportDetail()}},
		"spans": {status(w.keepSpans()), map[string]any{"count": sc, "bytes": sb, "dropped": sd, "max_count": w.cfg.MemoryMaxSpans, "max_bytes": w.cfg.MemoryMaxBytes}},
		"logs":  {status(w.cfg.LogsEnabled), map[string]any{"count": lc, "bytes": lb, "dropped": ld, "max_count": w.cfg.LogsMaxCount, "max_bytes": w.cfg.LogsMaxBytes}},
		"metrics": {status(w.cfg.MetricsEnabled), map[string]any{"count": mc, "bytes": mb, "dropped": md, "max_count": w.cfg.MetricsMaxCount, "max_bytes": w.cfg.MetricsMaxBytes, "exporter": w.cfg.MetricsExporter, "prometheus": w.promDetail(),
			"worker_metric_names_dropped": w.namesDropped.Load()}},
	}
	overall := "healthy"
	w.mu.Lock()
	cs := append([]Component(nil), w.components...)
	w.mu.Unlock()
	for _, c := range cs {
		st, det := c.Check()
		comps[c.Name] = health{st, det}
		if st != "healthy" && st != "disabled" {
			overall = "degraded"
		}
	}
	comps[Name] = health{status(true), map[string]any{"functions": []string{"engine::log::*", FnLogsList, FnLogsClear, FnTracesList, FnTracesTree, FnTracesClear, FnMetricsList, FnHealthCheck, FnAlertsList, FnSamplingRules, FnRollupsList}}}
	return map[string]any{"status": overall, "components": comps, "timestamp": time.Now().UnixMilli(), "version": w.version}, nil
}

func (w *Worker) endpointDetail() any {
	if w.exp == nil {
		return nil
	}
	return w.cfg.Endpoint
}

func (w *Worker) exportDetail() any {
	if w.exp == nil {
		return nil
	}
	return w.exp.stats()
}

func (w *Worker) promDetail() any {
	if w.prom == nil {
		return nil
	}
	return map[string]any{"address": w.prom.addr}
}
