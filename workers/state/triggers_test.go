package state

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

// A trigger's scope and key select the changes it gets; an unregistered trigger gets none, and a
// config that is not {scope?, key?} is refused, not read as "every change".
func TestTriggerScopesAndUnregistration(t *testing.T) {
	svc, rec, closeStore := open(t, t.TempDir())
	defer closeStore()
	ctx := context.Background()
	for _, tr := range []protocol.Trigger{
		{ID: "scope", FunctionID: "f", Config: json.RawMessage(`{"scope":"carts"}`)},
		{ID: "key", FunctionID: "g", Config: json.RawMessage(`{"scope":"carts","key":"c2"}`)},
	} {
		if err := svc.RegisterTrigger(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: "bad", FunctionID: "h", Config: json.RawMessage(`[1]`)}); err == nil {
		t.Error("a config that is a list was accepted")
	}
	count := func() map[string]int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := map[string]int{}
		for _, ev := range rec.evs {
			n[ev.Scope+"/"+ev.Key]++
		}
		rec.evs = nil
		return n
	}
	call(t, svc.Set, `{"scope":"carts","key":"c1","value":1}`)
	call(t, svc.Set, `{"scope":"carts","key":"c2","value":2}`)
	call(t, svc.Set, `{"scope":"users","key":"u1","value":3}`)
	if got := count(); got["carts/c1"] != 1 || got["carts/c2"] != 2 || got["users/u1"] != 0 {
		t.Errorf("events by item: %v (want carts/c1 once, carts/c2 twice, users/u1 never)", got)
	}
	if err := svc.UnregisterTrigger(ctx, protocol.Trigger{ID: "scope"}); err != nil {
		t.Fatal(err)
	}
	call(t, svc.Set, `{"scope":"carts","key":"c1","value":4}`)
	call(t, svc.Delete, `{"scope":"carts","key":"c2"}`)
	if got := count(); got["carts/c1"] != 0 || got["carts/c2"] != 1 {
		t.Errorf("after unregistering the scope trigger: %v (want only the key trigger's carts/c2)", got)
	}
	if err := svc.UnregisterTrigger(ctx, protocol.Trigger{ID: "never-registered"}); err != nil {
		t.Errorf("unregistering an unknown trigger: %v", err)
	}
}

// A trigger's condition function gets the event in the trigger's namespace; false or a failed
// call skips the handler, any other answer (null too) lets it fire; without a caller a
// condition is refused rather than ignored.
func TestTriggerCondition(t *testing.T) {
	svc, rec, closeStore := open(t, t.TempDir())
	defer closeStore()
	ctx := context.Background()
	if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: "c", FunctionID: "f", Config: json.RawMessage(`{"condition_function_id":"cond"}`)}); err == nil {
		t.Fatal("a condition was accepted with nothing to evaluate it")
	}
	var mu sync.Mutex
	asked := map[string][]string{} // condition -> namespaces asked
	svc.Call = func(_ context.Context, fn, ns string, payload any) (json.RawMessage, error) {
		ev := payload.(Event)
		mu.Lock()
		asked[fn] = append(asked[fn], ev.Key+"@"+ns)
		mu.Unlock()
		switch fn {
		case "no":
			return json.RawMessage(`false`), nil
		case "broken":
			return nil, errors.New("condition crashed")
		case "null":
			return json.RawMessage(`null`), nil
		}
		return json.RawMessage(`{"ok":true}`), nil
	}
	for _, c := range []string{"no", "broken", "null", "yes"} {
		tr := protocol.Trigger{ID: c, FunctionID: "h::" + c, Namespace: "team", Config: json.RawMessage(`{"scope":"s","condition_function_id":"` + c + `"}`)}
		if err := svc.RegisterTrigger(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	call(t, svc.Set, `{"scope":"s","key":"k","value":1}`)
	fired := 0
	settled := func() bool {
		mu.Lock()
		n := len(asked)
		mu.Unlock()
		rec.mu.Lock()
		fired = len(rec.evs)
		rec.mu.Unlock()
		return n == 4 && fired == 2
	}
	if !enginetest.Poll(10*time.Second, settled) {
		t.Fatalf("conditions asked %v, handlers fired %d (want 4 and 2)", asked, fired)
	}
	for c, got := range asked {
		if len(got) != 1 || got[0] != "k@team" {
			t.Errorf("condition %s asked %v, want once with the event in team", c, got)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, ev := range rec.evs {
		if ev.Key != "k" || ev.EventType != Created {
			t.Errorf("fired %+v", ev)
		}
	}
}
