package telemetry

import (
	"encoding/json"
	"strings"
	"testing"
)

// A telemetry-only socket has no worker of its own: the worker.id its frames name is kept only
// when that worker is connected, so made-up ids add nothing.
func TestOtelSocketWorkerID(t *testing.T) {
	w := quiet(DefaultConfig("test"))
	w.live = func(id string) bool { return id == "w-live" }
	w.Telemetry("", "MTRC", metricsFrame(map[string]string{"worker.id": "w-live"}, "iii.worker.memory.rss"))
	for i := range 100 {
		w.Telemetry("", "MTRC", metricsFrame(map[string]string{"worker.id": "ghost-" + string(rune('a'+i%26))}, "iii.worker.memory.rss"))
	}
	if m, _ := json.Marshal(w.WorkerMetrics("w-live")); !strings.Contains(string(m), `"memory_rss":1`) {
		t.Errorf("w-live's metrics = %s", m)
	}
	w.mu.Lock()
	n := len(w.latest)
	w.mu.Unlock()
	if n != 1 {
		t.Errorf("metrics kept for %d workers, want 1 (the connected one)", n)
	}
	// Points stay in the metric store, without a worker id.
	res := call(t, w.metricsList, map[string]any{})
	pts := res["sdk_metrics"].([]any)
	if len(pts) != 101 || pts[1].(map[string]any)["worker_id"] != nil {
		t.Errorf("sdk_metrics: %d points, second %v", len(pts), pts[1])
	}
}
