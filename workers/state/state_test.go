package state

import (
	"context"
	"encoding/json"
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
