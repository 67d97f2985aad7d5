package telemetry

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

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
