package telemetry

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
)

func TestAlertsAndSamplingAsIIIUnconfigured(t *testing.T) {
	cfg := DefaultConfig("test")
	cfg.SamplingRatio, cfg.LogsSamplingRatio = 0.25, 0.5
	w := quiet(cfg)
	alerts := call(t, w.alertsList, nil)
	if b, _ := json.Marshal(alerts); len(alerts) != 4 || alerts["firing_count"] != 0.0 || len(alerts["alerts"].([]any)) != 0 || len(alerts["rules"].([]any)) != 0 {
		t.Errorf("alerts = %s", b)
	}
	s := call(t, w.samplingRules, nil)
	tr, lg := s["traces"].(map[string]any), s["logs"].(map[string]any)
	if tr["default_ratio"] != 0.25 || tr["parent_based"] != true || len(tr["rules"].([]any)) != 0 || lg["sampling_ratio"] != 0.5 || s["timestamp"] == nil {
		t.Errorf("sampling = %v", s)
	}
}

func TestRollupsAggregateStoredPoints(t *testing.T) {
	w := quiet(DefaultConfig("test"))
	now := time.Now()
	minute := now.Truncate(time.Hour).Add(-time.Hour) // one hour bucket holds every point
	at := func(d time.Duration) uint64 { return uint64(minute.Add(d).UnixNano()) }
	for _, p := range []MetricPoint{
		{Name: "cpu", Type: "gauge", Value: 1, TimestampUnixNano: at(time.Second)},
		{Name: "cpu", Type: "gauge", Value: 3, TimestampUnixNano: at(30 * time.Second)},
		{Name: "cpu", Type: "gauge", Value: 8, TimestampUnixNano: at(61 * time.Second)},
		{Name: "mem", Type: "gauge", Value: 5, TimestampUnixNano: at(2 * time.Second)},
		{Name: "lat", Type: "histogram", Value: 12, Count: 4, TimestampUnixNano: at(3 * time.Second)},
		{Name: "lat", Type: "histogram", Value: 8, Count: 2, TimestampUnixNano: at(4 * time.Second)},
		{Name: "old", Type: "gauge", Value: 5, TimestampUnixNano: uint64(now.Add(-3 * time.Hour).UnixNano())},
	} {
		w.metrics.add(p, 100, now)
	}
	out := call(t, w.rollupsList, map[string]any{"start_time": minute.UnixMilli()})
	b, _ := json.Marshal(out["rollups"])
	m := uint64(minute.UnixNano())
	want, _ := json.Marshal([]rollup{
		{Name: "cpu", BucketStartNS: m, BucketEndNS: m + 60e9, Count: 2, Sum: 4, Min: 1, Max: 3, Avg: 2},
		{Name: "mem", BucketStartNS: m, BucketEndNS: m + 60e9, Count: 1, Sum: 5, Min: 5, Max: 5, Avg: 5},
		{Name: "cpu", BucketStartNS: m + 60e9, BucketEndNS: m + 120e9, Count: 1, Sum: 8, Min: 8, Max: 8, Avg: 8},
	})
	var norm any // the same key order as b's
	_ = json.Unmarshal(want, &norm)
	want, _ = json.Marshal(norm)
	if string(b) != string(want) {
		t.Errorf("rollups = %s\nwant      %s", b, want)
	}
	h := out["histogram_rollups"].([]any)
	if len(h) != 1 || h[0].(map[string]any)["total_count"] != 6.0 || h[0].(map[string]any)["total_sum"] != 20.0 {
		t.Errorf("histogram rollups = %v", h)
	}
	if out["level"] != 0.0 || out["source"] != "on_the_fly" {
		t.Errorf("rollups = %v", out)
	}
	one := call(t, w.rollupsList, map[string]any{"level": 2, "metric_name": "cpu", "start_time": minute.UnixMilli(), "end_time": minute.Add(time.Hour).UnixMilli()})
	r := one["rollups"].([]any)
	if len(r) != 1 || r[0].(map[string]any)["count"] != 3.0 || r[0].(map[string]any)["max"] != 8.0 {
		t.Errorf("level 2, cpu = %v", one)
	}
	if _, err := w.rollupsList(t.Context(), core.Caller{}, json.RawMessage(`{"level":-1}`)); err == nil {
		t.Error("a negative level is accepted")
	}
}
