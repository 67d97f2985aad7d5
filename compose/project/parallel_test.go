package project

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeStarts records how many starts run at once and the order they begin in.
type fakeStarts struct {
	mu      sync.Mutex
	now     int
	peak    int
	begun   []string
	doneAt  map[string]int
	beginAt map[string]int // how many starts had finished when it began
	counter int
	fail    map[string]bool
}

func (f *fakeStarts) start(_ context.Context, k string) error {
	f.mu.Lock()
	f.now++
	f.peak = max(f.peak, f.now)
	f.begun = append(f.begun, k)
	if f.beginAt == nil {
		f.beginAt = map[string]int{}
	}
	f.beginAt[k] = f.counter
	f.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // hold the slot so that concurrency is observable
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now--
	f.counter++
	f.doneAt[k] = f.counter
	if f.fail[k] {
		return errors.New(k + " failed")
	}
	return nil
}

func TestScheduleLimitAndOrder(t *testing.T) {
	var keys []string
	deps := map[string][]string{}
	for i := 0; i < 12; i++ {
		keys = append(keys, fmt.Sprintf("w%02d", i))
	}
	keys = append(keys, "api", "web")
	deps["api"] = []string{"w00", "w11"}
	deps["web"] = []string{"api"}
	f := &fakeStarts{doneAt: map[string]int{}}
	out, started := schedule(context.Background(), keys, deps, 3, f.start, func(string, error) bool { return false })
	if f.peak > 3 {
		t.Fatalf("%d starts ran at once, limit 3", f.peak)
	}
	if f.peak < 2 {
		t.Fatalf("independent containers did not start side by side (peak %d)", f.peak)
	}
	if len(started) != len(keys) {
		t.Fatalf("started %v", started)
	}
	for k, ds := range deps {
		for _, d := range ds {
			if out[k].err != nil || f.beginAt[k] < f.doneAt[d] {
				t.Fatalf("%s began before its dependency %s finished", k, d)
			}
		}
	}
	if f.doneAt["web"] != len(keys) {
		t.Fatalf("web (last in the graph) finished at %d", f.doneAt["web"])
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func TestScheduleStopsOnFailure(t *testing.T) {
	keys := []string{"db", "api", "web", "other"}
	deps := map[string][]string{"api": {"db"}, "web": {"api"}, "other": {"db"}}
	f := &fakeStarts{doneAt: map[string]int{}, fail: map[string]bool{"api": true}}
	out, started := schedule(context.Background(), keys, deps, 1, f.start, func(string, error) bool { return false })
	if out["api"].err == nil || !out["web"].skipped {
		t.Fatalf("outcomes %+v", out)
	}
	if indexOf(started, "db") < 0 || indexOf(started, "web") >= 0 {
		t.Fatalf("started %v", started)
	}
}

func TestScheduleToleratesOptional(t *testing.T) {
	keys := []string{"db", "extra", "web"}
	deps := map[string][]string{"web": {"extra"}}
	f := &fakeStarts{doneAt: map[string]int{}, fail: map[string]bool{"extra": true}}
	out, started := schedule(context.Background(), keys, deps, 4, f.start, func(k string, _ error) bool { return k == "extra" })
	if out["extra"].err == nil || out["web"].err != nil || out["web"].skipped || len(started) != 2 {
		t.Fatalf("outcomes %+v, started %v", out, started)
	}
}

func TestParallelStartsDefault(t *testing.T) {
	for v, want := range map[string]int{"": MaxParallelStarts, "2": 2, "0": MaxParallelStarts, "x": MaxParallelStarts} {
		if got := parallelStarts(v); got != want {
			t.Errorf("parallelStarts(%q) = %d, want %d", v, got, want)
		}
	}
}
