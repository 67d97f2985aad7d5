package cron

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
)

func TestParse(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for expr, want := range map[string]time.Time{
		"*/5 * * * * *":         base.Add(5 * time.Second),
		"0 30 9 * * *":          base.Add(9*time.Hour + 30*time.Minute),
		"0 0 0 1 1 * 2028":      time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC),
		"0 0 0 1 1 * 2027-2030": time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		"@every 90s":            base.Add(90 * time.Second),
		"0 0 12 * * MON-FRI *":  time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC),
	} {
		s, err := Parse(expr)
		if err != nil {
			t.Errorf("%q: %v", expr, err)
			continue
		}
		if got := s.Next(base); !got.Equal(want) {
			t.Errorf("%q: next %v, want %v", expr, got, want)
		}
	}
	s, _ := Parse("0 0 0 1 1 * 2020")
	if got := s.Next(base); !got.IsZero() {
		t.Errorf("a past year fires at %v", got)
	}
	for _, bad := range []string{"* * * * *", "61 * * * * *", "* * * * * * abc", "nonsense", "* * * * * * * *"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestInvalidExpressionCode(t *testing.T) {
	s, _ := Open(context.Background(), nil, "default", func(protocol.Trigger, Tick) {}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: "x", Config: json.RawMessage(`{"expression":"every day"}`)})
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != CodeInvalidExpression {
		t.Fatalf("got %v", err)
	}
}

// A description is kept; a key the worker does not implement refuses the trigger by name.
func TestTriggerKeys(t *testing.T) {
	s, _ := Open(context.Background(), nil, "default", func(protocol.Trigger, Tick) {}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: "x", Config: json.RawMessage(`{"expression":"0 0 1 1 * *","timezone":"UTC"}`)})
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != "TRIGGER_CONFIG_UNSUPPORTED" || !strings.Contains(pe.Message, `"timezone"`) {
		t.Fatalf("timezone: %v", err)
	}
}

// Two cron workers on one NATS with the same job fire each tick once between them.
func TestOneFirePerTickAcrossWorkers(t *testing.T) {
	st, err := jsstore.Open(context.Background(), jsstore.Config{Sync: "interval"}, t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	fired := map[string]int{}
	fire := func(_ protocol.Trigger, tick Tick) {
		mu.Lock()
		fired[tick.ScheduledTime]++
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, id := range []string{"engine-a-trigger", "engine-b-trigger"} {
		s, err := Open(ctx, st.JS, "default", fire, log)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterTrigger(ctx, protocol.Trigger{ID: id, FunctionID: "jobs::tick", Namespace: "default", Config: json.RawMessage(`{"expression":"* * * * * *"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, "3 ticks", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fired) >= 3
	})
	cancel()
	mu.Lock()
	defer mu.Unlock()
	for at, n := range fired {
		if n != 1 {
			t.Errorf("tick %s fired %d times", at, n)
		}
	}
}
