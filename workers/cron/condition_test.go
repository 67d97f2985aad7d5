package cron

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

// A claimed tick asks the trigger's condition function, in the trigger's namespace, with the
// tick: false or a failed call skips the handler, another answer lets it fire; without a
// caller a condition is refused rather than ignored.
func TestTickCondition(t *testing.T) {
	var mu sync.Mutex
	fired := map[string]int{}
	asked := map[string][]string{}
	fire := func(tr protocol.Trigger, _ Tick) {
		mu.Lock()
		defer mu.Unlock()
		fired[tr.ID]++
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _ := Open(ctx, nil, "default", fire, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := s.RegisterTrigger(ctx, protocol.Trigger{ID: "x", FunctionID: "f", Config: json.RawMessage(`{"expression":"@every 1s","condition_function_id":"c"}`)}); err == nil {
		t.Fatal("a condition was accepted with nothing to evaluate it")
	}
	s.Call = func(_ context.Context, fn, ns string, payload any) (json.RawMessage, error) {
		tick := payload.(Tick)
		mu.Lock()
		asked[fn] = append(asked[fn], tick.Trigger+"@"+ns)
		mu.Unlock()
		switch fn {
		case "no":
			return json.RawMessage(`false`), nil
		case "broken":
			return nil, errors.New("condition crashed")
		}
		return json.RawMessage(`true`), nil
	}
	for _, c := range []string{"no", "broken", "yes"} {
		tr := protocol.Trigger{ID: c, FunctionID: "h", Namespace: "team", Config: json.RawMessage(`{"expression":"* * * * * *","condition_function_id":"` + c + `"}`)}
		if err := s.RegisterTrigger(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(asked["no"]) >= 2 && len(asked["broken"]) >= 2 && fired["yes"] >= 2
	}
	if !enginetest.Poll(10*time.Second, done) {
		t.Fatalf("asked %v, fired %v", asked, fired)
	}
	mu.Lock()
	defer mu.Unlock()
	if fired["no"] != 0 || fired["broken"] != 0 {
		t.Errorf("handlers fired past their condition: %v", fired)
	}
	if asked["no"][0] != "cron@team" {
		t.Errorf("condition asked with %v, want the tick in team", asked["no"])
	}
}
