package telemetry

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
)

// engineLogScope marks the engine's own log lines among the stored logs (they are already on
// the console, so logs_console_output does not print them again).
const engineLogScope = "iii-engine"

// Handler is a slog.Handler that writes through to another and also keeps every record as a
// log of the engine (service_name the worker's), once a worker is attached.
type Handler struct {
	next slog.Handler
	w    *atomic.Pointer[Worker]
	pre  []slog.Attr
	grp  string
}

// NewHandler wraps next.
func NewHandler(next slog.Handler) *Handler {
	return &Handler{next: next, w: &atomic.Pointer[Worker]{}}
}

// Attach makes w keep the records from now on.
func (h *Handler) Attach(w *Worker) { h.w.Store(w) }

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle writes r through and keeps it.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if w := h.w.Load(); w != nil {
		attrs := map[string]any{}
		add := func(a slog.Attr) {
			k := a.Key
			if h.grp != "" {
				k = h.grp + "." + k
			}
			attrs[k] = a.Value.Resolve().String()
		}
		for _, a := range h.pre {
			add(a)
		}
		r.Attrs(func(a slog.Attr) bool { add(a); return true })
		lvl := "info"
		switch {
		case r.Level >= slog.LevelError:
			lvl = "error"
		case r.Level >= slog.LevelWarn:
			lvl = "warn"
		case r.Level < slog.LevelInfo:
			lvl = "debug"
		}
		w.addLog(Log{TimestampUnixNano: uint64(r.Time.UnixNano()), SeverityNumber: severities[lvl], SeverityText: strings.ToUpper(lvl),
			Body: r.Message, Attributes: attrs, ServiceName: w.cfg.ServiceName, InstrumentationScopeName: engineLogScope, InstrumentationScopeVersion: w.version})
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), w: h.w, pre: append(append([]slog.Attr(nil), h.pre...), attrs...), grp: h.grp}
}

// WithGroup returns a handler that puts later attributes in group name.
func (h *Handler) WithGroup(name string) slog.Handler {
	g := name
	if h.grp != "" {
		g = h.grp + "." + name
	}
	return &Handler{next: h.next.WithGroup(name), w: h.w, pre: h.pre, grp: g}
}
