package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

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
