package stream

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// customCaller is a worker with iii-sdk's createStream("mem", …): stream::get/set/delete/
// list/list_groups(mem) over a map, no stream::update(mem). stream::set(broken) fails, and
// stream::set(odd) answers a result that is not {old_value, new_value}; stream::get(lost) fails
// with another function's function_not_found. Every other call is recorded, as caller does.
type customCaller struct {
	caller
	mu    sync.Mutex
	items map[string]json.RawMessage // item_id -> value, of group "g"
	seen  []string                   // the custom functions called
}

func (c *customCaller) Call(ctx context.Context, fn string, payload any, opts ...protocol.CallOption) (json.RawMessage, error) {
	if !strings.HasPrefix(fn, "stream::") {
		return c.caller.Call(ctx, fn, payload, opts...)
	}
	b, _ := json.Marshal(payload)
	var in struct {
		ItemID string          `json:"item_id"`
		Data   json.RawMessage `json:"data"`
	}
	json.Unmarshal(b, &in)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, fn)
	old, had := c.items[in.ItemID]
	if !had {
		old = json.RawMessage("null")
	}
	switch fn {
	case "stream::get(mem)":
		return old, nil
	case "stream::set(mem)":
		c.items[in.ItemID] = in.Data
		return json.RawMessage(`{"old_value":` + string(old) + `,"new_value":` + string(in.Data) + `}`), nil
	case "stream::delete(mem)":
		delete(c.items, in.ItemID)
		return json.RawMessage(`{"old_value":` + string(old) + `}`), nil
	case "stream::list(mem)":
		return json.RawMessage(`[{"custom":true}]`), nil
	case "stream::list_groups(mem)":
		return json.RawMessage(`["g"]`), nil
	case "stream::set(broken)":
		return nil, protocol.NewError("DISK_FULL", "no room")
	case "stream::set(odd)":
		return json.RawMessage(`[1]`), nil
	case "stream::get(lost)":
		return nil, notFound("helper::lookup")
	}
	return nil, notFound(fn)
}

func TestCustomStream(t *testing.T) {
	c := &customCaller{caller: caller{got: make(chan struct{}, 16)}, items: map[string]json.RawMessage{}}
	svc, closeStore := open(t, t.TempDir(), c)
	defer closeStore()
	ctx := context.Background()
	if err := svc.RegisterTrigger(ctx, protocol.Trigger{ID: "t", FunctionID: "on-mem", Config: json.RawMessage(`{"stream_name":"mem"}`)}); err != nil {
		t.Fatal(err)
	}

	if got := call(t, svc.Set, `{"stream_name":"mem","group_id":"g","item_id":"a","data":1}`); got != `{"old_value":null,"new_value":1}` {
		t.Errorf("custom set: %s", got)
	}
	if fn, m := c.next(t); fn != "on-mem" || m.Event.Type != "create" || string(m.Event.Data) != "1" {
		t.Errorf("the custom set's trigger: %s %+v", fn, m)
	}
	call(t, svc.Set, `{"stream_name":"mem","group_id":"g","item_id":"a","data":2}`)
	if fn, m := c.next(t); fn != "on-mem" || m.Event.Type != "update" || string(m.Event.Data) != "2" {
		t.Errorf("the custom update's trigger: %s %+v", fn, m)
	}
	for _, x := range []struct {
		fn       func(context.Context, json.RawMessage) (any, error)
		in, want string
	}{
		{svc.Get, `{"stream_name":"mem","group_id":"g","item_id":"a"}`, `2`},
		{svc.List, `{"stream_name":"mem","group_id":"g"}`, `[{"custom":true}]`},
		{svc.ListGroups, `{"stream_name":"mem"}`, `["g"]`},
		{svc.Delete, `{"stream_name":"mem","group_id":"g","item_id":"a"}`, `{"old_value":2}`},
		{svc.Get, `{"stream_name":"mem","group_id":"g","item_id":"a"}`, `null`},
	} {
		if got := call(t, x.fn, x.in); got != x.want {
			t.Errorf("%s: got %s, want %s", x.in, got, x.want)
		}
	}
	if fn, m := c.next(t); fn != "on-mem" || m.Event.Type != "delete" || string(m.Event.Data) != "2" {
		t.Errorf("the custom delete's trigger: %s %+v", fn, m)
	}
	// No stream::update(mem): update uses the store, which the custom set never wrote.
	if got := call(t, svc.Update, `{"stream_name":"mem","group_id":"g","item_id":"b","ops":[{"type":"set","path":"n","value":1}]}`); got != `{"new_value":{"n":1},"old_value":null}` {
		t.Errorf("update without a custom function: %s", got)
	}
	if _, err := svc.kv.Get(ctx, itemKey("mem", "g", "a")); err == nil {
		t.Error("the custom set wrote to the store too")
	}
	c.mu.Lock()
	want := "stream::set(mem) stream::set(mem) stream::get(mem) stream::list(mem) stream::list_groups(mem) stream::delete(mem) stream::get(mem) stream::update(mem)"
	if got := strings.Join(c.seen, " "); got != want {
		t.Errorf("custom functions called:\n got %s\nwant %s", got, want)
	}
	c.mu.Unlock()

	for _, x := range []struct {
		fn                func(context.Context, json.RawMessage) (any, error)
		in, code, message string
	}{
		{svc.Set, `{"stream_name":"broken","group_id":"g","item_id":"a","data":1}`, CodeSetError, "stream::set(broken) failed: DISK_FULL: no room"},
		{svc.Set, `{"stream_name":"odd","group_id":"g","item_id":"a","data":1}`, CodeJSONError, "stream::set(odd) returned [1], not {old_value, new_value}"},
		{svc.Get, `{"stream_name":"lost","group_id":"g","item_id":"a"}`, errcode.FunctionNotFound, "helper::lookup"},
	} {
		_, err := x.fn(ctx, json.RawMessage(x.in))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != x.code || !strings.Contains(pe.Message, x.message) {
			t.Errorf("%s: got %v, want %s naming %q", x.in, err, x.code, x.message)
		}
	}
}
