package state

import (
	"context"
	"encoding/json"
	"testing"

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
