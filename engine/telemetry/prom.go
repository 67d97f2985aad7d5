package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// promServer serves /metrics in the Prometheus text format on prometheus_host:prometheus_port:
// the engine's invocation counters and durations, its workers and stores, and the last value
// of every iii.worker.* metric the SDKs report, by worker.
type promServer struct {
	addr     string
	srv      *http.Server
	done     chan struct{}
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func startProm(ctx context.Context, w *Worker) (*promServer, error) {
	addr := net.JoinHostPort(w.cfg.PrometheusHost, itoa(w.cfg.PrometheusPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errcode.New(errcode.ListenFailed, "iii-observability: cannot listen for Prometheus on %s (prometheus_host, prometheus_port): %w", addr, err)
	}
	reg := prometheus.NewRegistry()
	p := &promServer{addr: ln.Addr().String(), done: make(chan struct{}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iii_invocations_total", Help: "Invocations the engine routed, by function and status (ok or error)."},
			[]string{"function", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "iii_invocation_duration_seconds", Help: "Duration of the invocations the engine routed.",
			Buckets: prometheus.DefBuckets}, []string{"function"})}
	reg.MustRegister(p.calls, p.duration, &storeCollector{w: w})
	p.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(rw, r)
			return
		}
		// ContinueOnError: a metric that cannot be gathered is left out (and logged), the rest
		// is served, so one worker's data never fails a scrape.
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: promLog{w}}).ServeHTTP(rw, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			_ = p.srv.Close()
		}
		close(p.done)
	}()
	w.log.Info("Prometheus metrics served", "url", "http://"+p.addr+"/metrics")
	return p, nil
}

func (p *promServer) observe(fn string, perr *protocol.Error, d time.Duration) {
	status := "ok"
	if perr != nil {
		status = "error"
	}
	p.calls.WithLabelValues(fn, status).Inc()
	p.duration.WithLabelValues(fn).Observe(d.Seconds())
}

func (p *promServer) stop() {
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		_ = p.srv.Close()
	}
}

// promLog logs what a scrape left out, at debug level (a scrape may come every few seconds).
type promLog struct{ w *Worker }

func (l promLog) Println(v ...any) {
	l.w.log.Debug("Prometheus scrape left a metric out", "err", fmt.Sprint(v...))
}

// storeCollector reports the engine's workers and stores and the SDKs' worker metrics at
// scrape time. It is unchecked (Describe sends nothing): the SDK metrics are known only then.
type storeCollector struct{ w *Worker }

func (c *storeCollector) Describe(chan<- *prometheus.Desc) {}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(name, help string, v float64, labels ...string) {
		var keys, vals []string
		for i := 0; i+1 < len(labels); i += 2 {
			keys, vals = append(keys, labels[i]), append(vals, labels[i+1])
		}
		m, err := prometheus.NewConstMetric(prometheus.NewDesc(name, help, keys, nil), prometheus.GaugeValue, v, vals...)
		if err != nil {
			m = prometheus.NewInvalidMetric(prometheus.NewDesc(name, help, keys, nil), err)
		}
		ch <- m
	}
	w := c.w
	if w.e != nil {
		gauge("iii_workers_active", "Worker connections.", float64(len(w.e.Workers())))
	}
	for name, r := range map[string]func() (int, int, uint64){"spans": w.spans.stats, "logs": w.logs.stats, "metrics": w.metrics.stats} {
		n, b, d := r()
		gauge("iii_"+name+"_stored", "Records in the "+name+" store.", float64(n))
		gauge("iii_"+name+"_stored_bytes", "Estimated bytes of the "+name+" store.", float64(b))
		gauge("iii_"+name+"_dropped", "Records the "+name+" store dropped to stay within its bounds.", float64(d))
	}
	gauge("iii_sdk_metric_names_dropped", "SDK metric values not kept: a name outside iii.worker.*, or past the names one worker may report.", float64(w.namesDropped.Load()))
	w.mu.Lock()
	type row struct {
		name, worker string
		v            float64
	}
	var rows []row
	for id, m := range w.latest {
		for k, v := range m {
			rows = append(rows, row{k, id, v}) // k is a metricKey: a valid name, unique per worker
		}
	}
	w.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].name < rows[j].name || rows[i].name == rows[j].name && rows[i].worker < rows[j].worker
	})
	for _, r := range rows {
		gauge(r.name, "Last value the worker's SDK reported.", r.v, "worker_id", r.worker)
	}
}
