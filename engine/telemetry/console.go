package telemetry

import (
	"context"
	"encoding/json"
	"math"
	"sort"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Functions iii's console reads besides the stores, with iii's request and response shapes.
// Everyone who may call engine functions may call them: they answer with the configuration and
// the aggregates of the metrics store, which engine::metrics::list already shows.
//
//	engine::alerts::list    -> {alerts, rules, firing_count, timestamp}
//	engine::sampling::rules -> {traces: {default_ratio, rules, parent_based}, logs: {sampling_ratio}, timestamp}
//	engine::rollups::list   {start_time?, end_time?, level? (0=1m, 1=5m, 2=1h), metric_name?}
//	                        -> {rollups, histogram_rollups, level, source, query, timestamp}
const (
	FnAlertsList    = "engine::alerts::list"
	FnSamplingRules = "engine::sampling::rules"
	FnRollupsList   = "engine::rollups::list"
)

// installConsole adds the functions above to e.
func (w *Worker) installConsole(e *core.Engine) {
	e.HandleInline(FnAlertsList, "List configured alert rules with their current states and a firing_count", w.alertsList)
	e.HandleInline(FnSamplingRules, "Report the active trace and log sampling configuration", w.samplingRules)
	e.HandleInline(FnRollupsList, "Aggregate the stored metric points into 1-minute, 5-minute or 1-hour buckets: {start_time?, end_time?, level?, metric_name?}", w.rollupsList)
}

// alertsList answers as iii's alert manager does with no rules: the alerts key of the
// configuration is refused (CONFIG_UNSUPPORTED), so no rule can be configured and none fires.
func (w *Worker) alertsList(context.Context, core.Caller, json.RawMessage) (any, error) {
	return map[string]any{"alerts": []any{}, "rules": []any{}, "firing_count": 0, "timestamp": time.Now().UnixMilli()}, nil
}

// samplingRules reports sampling_ratio as the traces' default ratio (iii's fallback when no
// sampling block is set; that block is refused here, so there are never per-operation rules),
// parent_based true (a caller's traceparent sampled flag is followed) and logs_sampling_ratio.
func (w *Worker) samplingRules(context.Context, core.Caller, json.RawMessage) (any, error) {
	return map[string]any{
		"traces":    map[string]any{"default_ratio": w.cfg.SamplingRatio, "rules": []any{}, "parent_based": true},
		"logs":      map[string]any{"sampling_ratio": w.cfg.LogsSamplingRatio},
		"timestamp": time.Now().UnixMilli(),
	}, nil
}

// rollupLevels are iii's rollup intervals by level; a level past the last is the last, as iii's
// on-the-fly aggregation treats it.
var rollupLevels = []time.Duration{time.Minute, 5 * time.Minute, time.Hour}

// rollup is iii's AggregatedMetric: one metric's number points in one bucket.
type rollup struct {
	Name          string  `json:"name"`
	BucketStartNS uint64  `json:"bucket_start_ns"`
	BucketEndNS   uint64  `json:"bucket_end_ns"`
	Count         uint64  `json:"count"`
	Sum           float64 `json:"sum"`
	Min           float64 `json:"min"`
	Max           float64 `json:"max"`
	Avg           float64 `json:"avg"`
}

// histogramRollup is iii's AggregatedHistogram. The store keeps a histogram point's count and
// sum only, so its min, max and buckets are not known: null and empty.
type histogramRollup struct {
	Name           string    `json:"name"`
	BucketStartNS  uint64    `json:"bucket_start_ns"`
	BucketEndNS    uint64    `json:"bucket_end_ns"`
	TotalCount     uint64    `json:"total_count"`
	TotalSum       float64   `json:"total_sum"`
	Min            *float64  `json:"min"`
	Max            *float64  `json:"max"`
	BucketCounts   []uint64  `json:"bucket_counts"`
	ExplicitBounds []float64 `json:"explicit_bounds"`
}

// rollupsList aggregates the metric points the store holds when asked, as iii does when it has
// no rollup storage (source "on_the_fly"): buckets older than metrics_retention_seconds are not
// there. Times are in milliseconds; the range defaults to the last hour.
func (w *Worker) rollupsList(_ context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		StartTime  *uint64 `json:"start_time"`
		EndTime    *uint64 `json:"end_time"`
		Level      *int    `json:"level"`
		MetricName *string `json:"metric_name"`
	}
	if err := decodeArgs(payload, &in, FnRollupsList); err != nil {
		return nil, err
	}
	toNS := func(ms *uint64, what string) (uint64, error) {
		if *ms > math.MaxUint64/1_000_000 {
			return 0, protocol.NewError(errcode.InvalidArguments, "%s: %s value too large", FnRollupsList, what)
		}
		return *ms * 1_000_000, nil
	}
	end := uint64(time.Now().UnixNano())
	if in.EndTime != nil {
		ns, err := toNS(in.EndTime, "end_time")
		if err != nil {
			return nil, err
		}
		end = ns
	}
	start := end - min(end, uint64(time.Hour))
	if in.StartTime != nil {
		ns, err := toNS(in.StartTime, "start_time")
		if err != nil {
			return nil, err
		}
		start = ns
	}
	level := 0
	if in.Level != nil {
		if *in.Level < 0 {
			return nil, protocol.NewError(errcode.InvalidArguments, "%s: level %d is negative; 0 = 1 minute, 1 = 5 minutes, 2 = 1 hour", FnRollupsList, *in.Level)
		}
		level = *in.Level
	}
	interval := uint64(rollupLevels[min(level, len(rollupLevels)-1)])
	nums := map[[2]any]*rollup{}
	hists := map[[2]any]*histogramRollup{}
	for _, p := range w.metrics.snapshot(time.Now()) {
		if in.MetricName != nil && p.Name != *in.MetricName {
			continue
		}
		b := p.TimestampUnixNano / interval * interval
		if b < start || b+interval > end {
			continue
		}
		k := [2]any{p.Name, b}
		if p.Type == "histogram" {
			h := hists[k]
			if h == nil {
				h = &histogramRollup{Name: p.Name, BucketStartNS: b, BucketEndNS: b + interval, BucketCounts: []uint64{}, ExplicitBounds: []float64{}}
				hists[k] = h
			}
			h.TotalCount += p.Count
			h.TotalSum += p.Value
			continue
		}
		r := nums[k]
		if r == nil {
			r = &rollup{Name: p.Name, BucketStartNS: b, BucketEndNS: b + interval, Min: math.Inf(1), Max: math.Inf(-1)}
			nums[k] = r
		}
		r.Count++
		r.Sum += p.Value
		r.Min, r.Max = math.Min(r.Min, p.Value), math.Max(r.Max, p.Value)
		r.Avg = r.Sum / float64(r.Count)
	}
	rollups := byBucket(nums, func(r *rollup) (uint64, string) { return r.BucketStartNS, r.Name })
	histograms := byBucket(hists, func(h *histogramRollup) (uint64, string) { return h.BucketStartNS, h.Name })
	return map[string]any{
		"rollups": rollups, "histogram_rollups": histograms, "level": level, "source": "on_the_fly",
		"query":     map[string]any{"start_time": in.StartTime, "end_time": in.EndTime, "metric_name": in.MetricName},
		"timestamp": time.Now().UnixMilli(),
	}, nil
}

// byBucket lists the aggregates of m by bucket start, then metric name, as iii orders them.
func byBucket[T any](m map[[2]any]*T, key func(*T) (uint64, string)) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool {
		si, ni := key(&out[i])
		sj, nj := key(&out[j])
		return si < sj || si == sj && ni < nj
	})
	return out
}
