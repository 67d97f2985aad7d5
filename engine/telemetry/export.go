package telemetry

import (
	"context"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-go/iii/internal/base/errcode"
)

// Export batching: spans wait at most exportEvery, at most exportBatch go in one request, and
// at most exportQueue wait in all (more are dropped and counted).
const (
	exportEvery   = 500 * time.Millisecond
	exportBatch   = 512
	exportQueue   = 8192
	exportTimeout = 10 * time.Second
)

// exporter sends spans, the engine's and those the SDKs sent, to an OTLP/HTTP collector
// (protobuf, POST <endpoint>/v1/traces), keeping their trace and span ids.
type exporter struct {
	exp   *otlptrace.Exporter
	cfg   Config
	log   *slog.Logger
	queue chan Span
	done  chan struct{}

	mu        sync.Mutex
	resources map[string]*resource.Resource // by service name

	sent, dropped, failed atomic.Uint64
	lastErr               atomic.Value // string
}

func newExporter(ctx context.Context, cfg Config, log *slog.Logger) (*exporter, error) {
	u := strings.TrimSuffix(cfg.Endpoint, "/") + "/v1/traces"
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u), otlptracehttp.WithTimeout(exportTimeout))
	if err != nil {
		return nil, errcode.New(errcode.ConfigInvalid, "iii-observability config: endpoint %s: %w", cfg.Endpoint, err)
	}
	x := &exporter{exp: exp, cfg: cfg, log: log, queue: make(chan Span, exportQueue), done: make(chan struct{}), resources: map[string]*resource.Resource{}}
	go x.run(ctx)
	return x, nil
}

// push queues s for export without waiting; a full queue drops it.
func (x *exporter) push(s Span) {
	select {
	case x.queue <- s:
	default:
		x.dropped.Add(1)
	}
}

func (x *exporter) run(ctx context.Context) {
	defer close(x.done)
	t := time.NewTicker(exportEvery)
	defer t.Stop()
	batch := make([]Span, 0, exportBatch)
	flush := func() {
		if len(batch) > 0 {
			x.send(batch)
			batch = batch[:0]
		}
	}
	for {
		select {
		case s := <-x.queue:
			batch = append(batch, s)
			if len(batch) == exportBatch {
				flush()
			}
		case <-t.C:
			flush()
		case <-ctx.Done():
			for {
				select {
				case s := <-x.queue:
					batch = append(batch, s)
					if len(batch) == exportBatch {
						flush()
					}
				default:
					flush()
					return
				}
			}
		}
	}
}

// stop waits for the last batch once the context of newExporter ended.
func (x *exporter) stop() {
	select {
	case <-x.done:
	case <-time.After(exportTimeout + time.Second):
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = x.exp.Shutdown(ctx)
}

func (x *exporter) send(batch []Span) {
	stubs := make(tracetest.SpanStubs, 0, len(batch))
	for i := range batch {
		stubs = append(stubs, x.stub(&batch[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), exportTimeout)
	defer cancel()
	if err := x.exp.ExportSpans(ctx, stubs.Snapshots()); err != nil {
		if x.failed.Add(uint64(len(batch))) == uint64(len(batch)) {
			x.log.Warn("OTLP export failed", "endpoint", x.cfg.Endpoint, "err", err)
		}
		x.lastErr.Store(err.Error())
		return
	}
	x.sent.Add(uint64(len(batch)))
}

func (x *exporter) stats() map[string]any {
	last, _ := x.lastErr.Load().(string)
	return map[string]any{"sent": x.sent.Load(), "dropped": x.dropped.Load(), "failed": x.failed.Load(), "last_error": last}
}

func (x *exporter) resource(service string) *resource.Resource {
	x.mu.Lock()
	defer x.mu.Unlock()
	if r := x.resources[service]; r != nil {
		return r
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(service)}
	if service == x.cfg.ServiceName {
		if x.cfg.ServiceVersion != "" {
			attrs = append(attrs, semconv.ServiceVersion(x.cfg.ServiceVersion))
		}
		if x.cfg.ServiceNamespace != "" {
			attrs = append(attrs, semconv.ServiceNamespace(x.cfg.ServiceNamespace))
		}
	}
	r := resource.NewWithAttributes(semconv.SchemaURL, attrs...)
	if len(x.resources) < 256 {
		x.resources[service] = r
	}
	return r
}

func traceIDOf(s string) trace.TraceID {
	var id trace.TraceID
	b, _ := hex.DecodeString(s)
	copy(id[:], b)
	return id
}

func spanIDOf(s string) trace.SpanID {
	var id trace.SpanID
	b, _ := hex.DecodeString(s)
	copy(id[:], b)
	return id
}

func attrsOf(pairs [][2]string) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, attribute.String(p[0], p[1]))
	}
	return out
}

func (x *exporter) stub(s *Span) tracetest.SpanStub {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceIDOf(s.TraceID), SpanID: spanIDOf(s.SpanID), TraceFlags: trace.FlagsSampled})
	st := tracetest.SpanStub{Name: s.Name, SpanContext: sc, SpanKind: trace.SpanKind(s.Kind),
		StartTime: time.Unix(0, int64(s.StartTimeUnixNano)), EndTime: time.Unix(0, int64(s.EndTimeUnixNano)),
		Attributes: attrsOf(s.Attributes), Resource: x.resource(s.ServiceName),
		InstrumentationScope: instrumentation.Scope{Name: s.InstrumentationScopeName, Version: s.InstrumentationScopeVersion}}
	if s.ParentSpanID != nil {
		st.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: spanIDOf(*s.ParentSpanID), TraceFlags: trace.FlagsSampled, Remote: true})
	}
	switch s.Status {
	case "ok":
		st.Status = sdktrace.Status{Code: codes.Ok}
	case "error":
		st.Status = sdktrace.Status{Code: codes.Error, Description: s.StatusDescription}
	}
	for _, e := range s.Events {
		st.Events = append(st.Events, sdktrace.Event{Name: e.Name, Time: time.Unix(0, int64(e.TimestampUnixNano)), Attributes: attrsOf(e.Attributes)})
	}
	for _, l := range s.Links {
		ts, _ := trace.ParseTraceState(l.TraceState)
		st.Links = append(st.Links, sdktrace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceIDOf(l.TraceID),
			SpanID: spanIDOf(l.SpanID), TraceState: ts}), Attributes: attrsOf(l.Attributes)})
	}
	return st
}

// itoa is strconv.Itoa, for the Prometheus listener's address.
func itoa(n int) string { return strconv.Itoa(n) }
