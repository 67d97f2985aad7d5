package telemetry

import (
	"strings"
	"time"
)

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
