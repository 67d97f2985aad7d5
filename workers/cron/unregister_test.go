package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
)

// An unregistered job fires no more, a job registered again under its id replaces the old one
// (one fire per tick, not two), and unregistering an unknown id is not an error. A second job
// that stays registered is the clock: its ticks show time passing without a sleep.
func TestUnregisterAndReplace(t *testing.T) {
	st, err := jsstore.Open(context.Background(), jsstore.Config{Sync: "interval"}, t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	fired := map[string]map[string]int{} // function -> scheduled time -> fires
	fire := func(tr protocol.Trigger, tick Tick) {
		mu.Lock()
		defer mu.Unlock()
		if fired[tr.FunctionID] == nil {
			fired[tr.FunctionID] = map[string]int{}
		}
		fired[tr.FunctionID][tick.ScheduledTime]++
	}
	count := func(fn string) (ticks, fires int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range fired[fn] {
			ticks++
			fires += n
		}
		return ticks, fires
	}
	waitTicks := func(fn string, n int) {
		t.Helper()
		enginetest.Eventually(t, fmt.Sprintf("%d ticks of %s", n, fn), 15*time.Second, func() bool {
			ticks, _ := count(fn)
			return ticks >= n
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Open(ctx, st.JS, "default", fire, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	every := json.RawMessage(`{"expression":"* * * * * *"}`)
	gone := protocol.Trigger{ID: "gone", FunctionID: "jobs::gone", Namespace: "default", Config: every}
	twice := protocol.Trigger{ID: "twice", FunctionID: "jobs::twice", Namespace: "default", Config: every}
	clock := protocol.Trigger{ID: "clock", FunctionID: "jobs::clock", Namespace: "default", Config: every}
	for _, tr := range []protocol.Trigger{gone, twice, twice, clock} {
		if err := s.RegisterTrigger(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	waitTicks("jobs::gone", 1)
	if err := s.UnregisterTrigger(ctx, gone); err != nil {
		t.Fatal(err)
	}
	// A fire already under way when it was unregistered may still land: count from a tick later.
	clockNow, _ := count("jobs::clock")
	waitTicks("jobs::clock", clockNow+1)
	_, before := count("jobs::gone")
	waitTicks("jobs::clock", clockNow+4)
	if _, after := count("jobs::gone"); after != before {
		t.Errorf("the unregistered job fired %d more times", after-before)
	}
	if ticks, fires := count("jobs::twice"); ticks == 0 || fires != ticks {
		t.Errorf("a job registered twice under one id: %d fires for %d ticks, want one each", fires, ticks)
	}
	if err := s.UnregisterTrigger(ctx, protocol.Trigger{ID: "never"}); err != nil {
		t.Errorf("unregistering an unknown id: %v", err)
	}
}
