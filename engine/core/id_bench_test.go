package core

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

// BenchmarkNewID: one engine-assigned invocation id.
func BenchmarkNewID(b *testing.B) {
	e := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b.ReportAllocs()
	for b.Loop() {
		_ = e.newID()
	}
}

// BenchmarkForwardedCall: calls from one worker to another through the engine, in parallel;
// each gets an engine-assigned invocation id.
func BenchmarkForwardedCall(b *testing.B) {
	url := enginetest.Start(b, New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})).URL
	ctx := context.Background()
	start := func(fns map[string]protocol.Handler) *protocol.Worker {
		w := protocol.NewWorker(protocol.Config{URL: url, Name: "bench"})
		for id, h := range fns {
			if err := w.Register(id, h); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { w.Close() })
		return w
	}
	start(map[string]protocol.Handler{"bench::echo": func(_ context.Context, in json.RawMessage) (any, error) { return in, nil }})
	caller := start(nil)
	payload := json.RawMessage(`{"cmd":"echo","args":["hello"]}`)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := caller.Call(ctx, "bench::echo", payload); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
