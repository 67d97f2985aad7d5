package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/jsstore"
)

type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) fire(_ protocol.Trigger, ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func open(t *testing.T, dir string) (*Service, *recorder, func()) {
	t.Helper()
	st, err := jsstore.Open(context.Background(), jsstore.Config{}, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	svc, err := Open(context.Background(), st.JS, "default", 1, rec.fire)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return svc, rec, st.Close
}

func call(t *testing.T, fn func(context.Context, json.RawMessage) (any, error), payload string) string {
	t.Helper()
	out, err := fn(context.Background(), json.RawMessage(payload))
	if err != nil {
		t.Fatalf("%s: %v", payload, err)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func TestFunctionsEventsAndDurability(t *testing.T) {
	dir := t.TempDir()
	svc, rec, closeStore := open(t, dir)
	_ = svc.RegisterTrigger(context.Background(), protocol.Trigger{ID: "all", FunctionID: "f"})
	_ = svc.RegisterTrigger(context.Background(), protocol.Trigger{ID: "orders", FunctionID: "g", Config: json.RawMessage(`{"scope":"orders","key":"o1"}`)})

	if got := call(t, svc.Set, `{"scope":"orders","key":"o1","value":{"status":"new","n":1}}`); got != `{"new_value":{"status":"new","n":1},"old_value":null}` {
		t.Errorf("set: %s", got)
	}
	if got := call(t, svc.Update, `{"scope":"orders","key":"o1","ops":[{"type":"increment","path":"n","by":2},{"type":"set","path":"status","value":"paid"},{"type":"append","path":"tags","value":"x"},{"type":"merge","path":"","value":{"extra":true}}]}`); got != `{"new_value":{"extra":true,"n":3,"status":"paid","tags":"x"},"old_value":{"status":"new","n":1}}` {
		t.Errorf("update: %s", got)
	}
	call(t, svc.Set, `{"scope":"orders","key":"o2","value":2}`)
	call(t, svc.Set, `{"scope":"users","key":"u/1 é","value":"alice"}`)
	if got := call(t, svc.List, `{"scope":"orders"}`); got != `[{"extra":true,"n":3,"status":"paid","tags":"x"},2]` {
		t.Errorf("list: %s", got)
	}
	if got := call(t, svc.ListGroups, `{}`); got != `{"groups":["orders","users"]}` {
		t.Errorf("groups: %s", got)
	}
	if got := call(t, svc.Delete, `{"scope":"orders","key":"o2"}`); got != `2` {
		t.Errorf("delete: %s", got)
	}
	if got := call(t, svc.Get, `{"scope":"orders","key":"o2"}`); got != `null` {
		t.Errorf("get deleted: %s", got)
	}
	if _, err := svc.Set(context.Background(), json.RawMessage(`{"key":"k"}`)); err == nil {
		t.Error("set without scope accepted")
	}
	if _, err := svc.Update(context.Background(), json.RawMessage(`{"scope":"users","key":"u/1 é","ops":[{"type":"increment","path":"n"}]}`)); err == nil {
		t.Error("increment through a string accepted")
	}

	rec.mu.Lock()
	var types []string
	for _, ev := range rec.evs {
		types = append(types, ev.EventType+" "+ev.Scope+"/"+ev.Key)
	}
	first, _ := json.Marshal(rec.evs[0])
	rec.mu.Unlock()
	// iii's state event: type "state", then event_type.
	if !strings.HasPrefix(string(first), `{"type":"state","event_type":"state:created",`) {
		t.Errorf("event %s", first)
	}
	want := []string{
		"state:created orders/o1", "state:created orders/o1", // both triggers
		"state:updated orders/o1", "state:updated orders/o1",
		"state:created orders/o2", "state:created users/u/1 é", "state:deleted orders/o2",
	}
	if d := cmp.Diff(want, types); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}

	// Closed and opened again on the same directory: the values are there.
	closeStore()
	svc2, _, closeStore2 := open(t, dir)
	defer closeStore2()
	if got := call(t, svc2.Get, `{"scope":"users","key":"u/1 é"}`); got != `"alice"` {
		t.Errorf("after reopening: %s", got)
	}
}

// Concurrent updates of one key lose nothing: each is a compare-and-set.
func TestConcurrentIncrements(t *testing.T) {
	svc, _, closeStore := open(t, t.TempDir())
	defer closeStore()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if _, err := svc.Update(context.Background(), json.RawMessage(`{"scope":"c","key":"n","ops":[{"type":"increment","path":""}]}`)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := call(t, svc.Get, `{"scope":"c","key":"n"}`); got != `80` {
		t.Errorf("counter %s, want 80", got)
	}
}

// TestAppendLikeIII: append pushes onto an array or concatenates a string to a string, as iii's
// state worker does; a missing or null target becomes the string or a one-element array (always
// an array below a nested path); anything else is refused and the value stays as it was.
func TestAppendLikeIII(t *testing.T) {
	for _, c := range []struct{ cur, op, want string }{
		{`null`, `{"type":"append","value":"ab"}`, `"ab"`},
		{`null`, `{"type":"append","value":1}`, `[1]`},
		{`"ab"`, `{"type":"append","value":"cd"}`, `"abcd"`},
		{`[1]`, `{"type":"append","value":"x"}`, `[1,"x"]`},
		{`{}`, `{"type":"append","path":"log","value":"a"}`, `{"log":"a"}`},
		{`{"log":null}`, `{"type":"append","path":"log","value":{"k":1}}`, `{"log":[{"k":1}]}`},
		{`{"log":"a"}`, `{"type":"append","path":"log","value":"b"}`, `{"log":"ab"}`},
		{`{"log":["a"]}`, `{"type":"append","path":"log","value":"b"}`, `{"log":["a","b"]}`},
		{`{}`, `{"type":"append","path":"s.abc.events","value":"e"}`, `{"s":{"abc":{"events":["e"]}}}`},
		{`{}`, `{"type":"append","path":["s","a.b"],"value":"e"}`, `{"s":{"a.b":["e"]}}`},
		{`{"s":{"a.b":"x"}}`, `{"type":"append","path":["s","a.b"],"value":"y"}`, `{"s":{"a.b":"xy"}}`},
	} {
		var op Op
		if err := json.Unmarshal([]byte(c.op), &op); err != nil {
			t.Fatal(err)
		}
		got, err := Apply(json.RawMessage(c.cur), []Op{op})
		if err != nil || string(got) != c.want {
			t.Errorf("%s on %s: got %s, %v; want %s", c.op, c.cur, got, err, c.want)
		}
	}
	for _, c := range []struct{ cur, op string }{
		{`"ab"`, `{"type":"append","value":1}`},
		{`{"log":"a"}`, `{"type":"append","path":"log","value":["b"]}`},
		{`{"log":{"k":1}}`, `{"type":"append","path":"log","value":"b"}`},
		{`7`, `{"type":"append","value":"b"}`},
		{`{}`, `{"type":"append","path":7,"value":"b"}`},
	} {
		var op Op
		err := json.Unmarshal([]byte(c.op), &op)
		if err == nil {
			_, err = Apply(json.RawMessage(c.cur), []Op{op})
		}
		if err == nil {
			t.Errorf("%s on %s accepted", c.op, c.cur)
		}
	}
}

func code(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// compare-and-set swaps only on the expected value (absent when expected is omitted or null),
// answers the stored value on a miss, and fires the same events as set.
func TestCompareAndSet(t *testing.T) {
	svc, rec, closeStore := open(t, t.TempDir())
	defer closeStore()
	_ = svc.RegisterTrigger(context.Background(), protocol.Trigger{ID: "all", FunctionID: "f"})
	for _, c := range []struct{ payload, want string }{
		{`{"scope":"s","key":"k","value":{"v":1}}`, `{"swapped":true}`},
		{`{"scope":"s","key":"k","value":{"v":2}}`, `{"current":{"v":1},"swapped":false}`},
		{`{"scope":"s","key":"k","expected":null,"value":{"v":2}}`, `{"current":{"v":1},"swapped":false}`},
		{`{"scope":"s","key":"k","expected":{"v":1.0},"value":{"v":2}}`, `{"current":{"v":1},"swapped":false}`},
		{`{"scope":"s","key":"k","expected": { "v" : 1 },"value":{"v":2,"w":[1]}}`, `{"swapped":true}`},
		{`{"scope":"s","key":"k","expected":{"w":[1],"v":2},"value":3}`, `{"swapped":true}`},
		{`{"scope":"s","key":"other","expected":3,"value":4}`, `{"current":null,"swapped":false}`},
	} {
		if got := call(t, svc.CompareAndSet, c.payload); got != c.want {
			t.Errorf("%s: %s, want %s", c.payload, got, c.want)
		}
	}
	if got := call(t, svc.Get, `{"scope":"s","key":"k"}`); got != `3` {
		t.Errorf("stored %s", got)
	}
	if got := call(t, svc.Get, `{"scope":"s","key":"other"}`); got != `null` {
		t.Errorf("a missed compare-and-set stored %s", got)
	}
	for _, p := range []string{`{"scope":"s","key":"k"}`, `{"scope":"s","value":1}`, `[1]`} {
		if _, err := svc.CompareAndSet(context.Background(), json.RawMessage(p)); code(err) != "INVALID_ARGUMENTS" {
			t.Errorf("%s: %v, want INVALID_ARGUMENTS", p, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var types []string
	for _, ev := range rec.evs {
		types = append(types, ev.EventType+" "+string(ev.OldValue)+" "+string(ev.NewValue))
	}
	want := []string{`state:created null {"v":1}`, `state:updated {"v":1} {"v":2,"w":[1]}`, `state:updated {"v":2,"w":[1]} 3`}
	if d := cmp.Diff(want, types); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

// Of concurrent compare-and-sets expecting the same value, exactly one swaps; the others see
// the winner's value.
func TestCompareAndSetRace(t *testing.T) {
	svc, _, closeStore := open(t, t.TempDir())
	defer closeStore()
	for round, expected := range []string{``, `,"expected":"start"`} {
		if round == 1 {
			call(t, svc.Set, `{"scope":"race","key":"k1","value":"start"}`)
		}
		key := []string{"k0", "k1"}[round]
		const n = 16
		results := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := svc.CompareAndSet(context.Background(), json.RawMessage(fmt.Sprintf(`{"scope":"race","key":%q%s,"value":"w%d"}`, key, expected, i)))
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := json.Marshal(out)
				results[i] = string(b)
			}()
		}
		wg.Wait()
		winner := -1
		for i, r := range results {
			if r == `{"swapped":true}` {
				if winner >= 0 {
					t.Fatalf("%s: callers %d and %d both swapped", key, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("%s: nobody swapped: %v", key, results)
		}
		stored := call(t, svc.Get, fmt.Sprintf(`{"scope":"race","key":%q}`, key))
		if stored != fmt.Sprintf(`"w%d"`, winner) {
			t.Errorf("%s: stored %s, winner w%d", key, stored, winner)
		}
		for i, r := range results {
			if i != winner && r != `{"current":`+stored+`,"swapped":false}` {
				t.Errorf("%s: loser %d answered %s", key, i, r)
			}
		}
	}
}

func TestListKeys(t *testing.T) {
	svc, _, closeStore := open(t, t.TempDir())
	defer closeStore()
	if got := call(t, svc.ListKeys, `{"scope":"empty"}`); got != `{"keys":[]}` {
		t.Errorf("empty scope: %s", got)
	}
	for _, k := range []string{"b", "a/1 é", "c"} {
		call(t, svc.Set, fmt.Sprintf(`{"scope":"s","key":%q,"value":null}`, k))
	}
	call(t, svc.Set, `{"scope":"other","key":"z","value":1}`)
	call(t, svc.Delete, `{"scope":"s","key":"c"}`)
	if got := call(t, svc.ListKeys, `{"scope":"s"}`); got != `{"keys":["a/1 é","b"]}` {
		t.Errorf("keys: %s", got)
	}
	if _, err := svc.ListKeys(context.Background(), json.RawMessage(`{}`)); code(err) != "INVALID_ARGUMENTS" {
		t.Errorf("no scope: %v", err)
	}
}

// max_value_bytes bounds every write by its compact JSON size; the refused value is not stored.
func TestMaxValueBytes(t *testing.T) {
	svc, rec, closeStore := open(t, t.TempDir())
	defer closeStore()
	_ = svc.RegisterTrigger(context.Background(), protocol.Trigger{ID: "all", FunctionID: "f"})
	svc.MaxValueBytes = 10
	call(t, svc.Set, `{"scope":"s","key":"k","value": [ 1, 2, 3, 4 ] }`) // 9 bytes compact
	for name, c := range map[string]struct {
		fn      func(context.Context, json.RawMessage) (any, error)
		payload string
	}{
		"set":    {svc.Set, `{"scope":"s","key":"k","value":"123456789"}`},
		"cas":    {svc.CompareAndSet, `{"scope":"s","key":"k","expected":[1,2,3,4],"value":[1,2,3,4,5]}`},
		"update": {svc.Update, `{"scope":"s","key":"k","ops":[{"type":"append","value":55}]}`},
	} {
		_, err := c.fn(context.Background(), json.RawMessage(c.payload))
		if code(err) != CodeValueTooLarge || !strings.Contains(err.Error(), "max_value_bytes of 10") {
			t.Errorf("%s: %v, want VALUE_TOO_LARGE", name, err)
		}
	}
	if got := call(t, svc.Get, `{"scope":"s","key":"k"}`); got != `[1,2,3,4]` {
		t.Errorf("stored %s", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.evs) != 1 {
		t.Errorf("%d events, want the one of the accepted set", len(rec.evs))
	}
}
