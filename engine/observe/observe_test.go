package observe

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func mustFilter(t *testing.T, s string) Filter {
	t.Helper()
	f, err := ParseFilter(json.RawMessage(s))
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return f
}

func TestFilterMatches(t *testing.T) {
	doc := Call{Input: json.RawMessage(`{"order":{"total":120,"status":"shipped","tags":["a","b"]}}`),
		Output: json.RawMessage(`{"ok":true}`), Caller: Caller{WorkerID: "w1", WorkerName: "shop"}}.doc()
	for _, c := range []struct {
		filter string
		want   bool
	}{
		{`{}`, true},
		{`{"input.order.status": "shipped"}`, true},
		{`{"input.order.status": {"$eq": "new"}}`, false},
		{`{"input.order.total": {"$gt": 100, "$lte": 120}}`, true},
		{`{"input.order.total": {"$gt": 120}}`, false},
		{`{"input.order.total": 120.0}`, true},
		{`{"input.order.tags.1": "b"}`, true},
		{`{"input.order.tags": ["a", "b"]}`, true},
		{`{"input.order.status": {"$in": ["new", "shipped"]}}`, true},
		{`{"input.order.status": {"$nin": ["new", "shipped"]}}`, false},
		{`{"input.order.coupon": {"$exists": false}}`, true},
		{`{"input.order.coupon": {"$ne": "x"}}`, true},
		{`{"output.ok": true, "caller.worker_name": "shop"}`, true},
		{`{"error.code": {"$exists": true}}`, false},
		{`{"$or": [{"input.order.total": {"$lt": 10}}, {"caller.worker_id": "w1"}]}`, true},
		{`{"$and": [{"input.order.total": {"$lt": 10}}, {"caller.worker_id": "w1"}]}`, false},
		{`{"input.order.total": {"$gt": "a"}}`, false},
	} {
		if got := mustFilter(t, c.filter).Matches(doc); got != c.want {
			t.Errorf("%s: got %v, want %v", c.filter, got, c.want)
		}
	}
}

func TestFilterRefusesWhatItCannotRead(t *testing.T) {
	for _, s := range []string{`[]`, `{"body.x": 1}`, `{"input..x": 1}`, `{"input.x": {"$regex": "a"}}`,
		`{"$not": {}}`, `{"input.x": {"$in": "a"}}`, `{"input.x": {"$exists": 1}}`, `{"input.x": {"$gt": [1]}}`, `{"$or": []}`} {
		if _, err := ParseFilter(json.RawMessage(s)); err == nil {
			t.Errorf("%s: accepted", s)
		}
	}
}

func request(t *testing.T, s string) Request {
	t.Helper()
	var r Request
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewChecksEveryField(t *testing.T) {
	now := time.Now()
	for _, c := range []struct{ req, want string }{
		{`{"target": "t::x"}`, "source.function_id"},
		{`{"source": {"function_id": "a::b"}}`, "target is required"},
		{`{"source": {"function_id": "a::b", "args": {"x": 1}}, "target": "t::x"}`, "args"},
		{`{"source": {"function_id": "a::b"}, "target": "a::b"}`, "each call would run it again"},
		{`{"source": {"function_id": "a::b", "capture": ["body"]}, "target": "t::x"}`, "unknown part"},
		{`{"source": {"function_id": "a::b", "deliver": "all"}, "target": "t::x"}`, "deliver"},
		{`{"source": {"function_id": "a::b", "on": "always"}, "target": "t::x"}`, "source.on"},
		{`{"source": {"function_id": "a::b", "filters": {"x": 1}}, "target": "t::x"}`, "source.filters"},
		{`{"source": {"function_id": "a::b"}, "target": "t::x", "options": {"max_fires": -1}}`, "max_fires"},
		{`{"source": {"function_id": "a::b"}, "target": "t::x", "options": {"max_in_flight": 5000}}`, "max_in_flight"},
	} {
		if _, err := New(request(t, c.req), "id", "default", "default", now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.req, err, c.want)
		}
	}
	o, err := New(request(t, `{"source": {"function_id": "a::b", "namespace": "shop"}, "target": {"function_id": "t::x", "namespace": "ops"}, "options": {"id": "mine"}}`),
		"generated", "default", "default", now)
	if err != nil || o.ID != "mine" || o.Namespace != "shop" || o.Target != (Target{"t::x", "ops"}) {
		t.Fatalf("%+v %v", o, err)
	}
}

func add(t *testing.T, r *Registry, owner, req string) *Observer {
	t.Helper()
	o, err := New(request(t, req), owner+"-"+req, "default", "default", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	o.Owner = owner
	if _, err := r.Add(o); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestMatchDeliversEnvelopeByCapture(t *testing.T) {
	r := NewRegistry(Limits{})
	if r.Of("default", "a::b") != nil {
		t.Fatal("observers of an empty registry")
	}
	add(t, r, "w1", `{"source": {"function_id": "a::b"}, "target": "t::all", "options": {"metadata": {"team": "ops"}}}`)
	add(t, r, "w1", `{"source": {"function_id": "a::b", "capture": ["output"]}, "target": "t::out"}`)
	add(t, r, "w1", `{"source": {"function_id": "a::b", "deliver": "input"}, "target": "t::in"}`)
	add(t, r, "w1", `{"source": {"function_id": "a::b", "on": "error"}, "target": "t::err"}`)
	add(t, r, "w1", `{"source": {"function_id": "a::b", "filters": {"input.n": {"$gt": 5}}}, "target": "t::big"}`)
	call := Call{FunctionID: "a::b", Namespace: "default", Input: json.RawMessage(`{"n":1}`), Output: json.RawMessage(`{"ok":true}`),
		Caller: Caller{WorkerID: "c1", WorkerName: "caller"}}
	got := map[string]string{}
	for _, d := range r.Match(r.Of("default", "a::b"), call, time.Now(), nil) {
		got[d.Observer.Target.FunctionID] = string(d.Payload())
		d.Done(false)
	}
	want := map[string]string{
		"t::all": `{"observer_id":"w1-{\"source\": {\"function_id\": \"a::b\"}, \"target\": \"t::all\", \"options\": {\"metadata\": {\"team\": \"ops\"}}}","function_id":"a::b","namespace":"default","input":{"n":1},"output":{"ok":true},"caller":{"worker_id":"c1","worker_name":"caller"},"observer_metadata":{"team":"ops"}}`,
		"t::out": `{"observer_id":"w1-{\"source\": {\"function_id\": \"a::b\", \"capture\": [\"output\"]}, \"target\": \"t::out\"}","function_id":"a::b","namespace":"default","output":{"ok":true}}`,
		"t::in":  `{"n":1}`,
	}
	if len(got) != len(want) {
		t.Fatalf("fired %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s:\n got %s\nwant %s", k, got[k], v)
		}
	}
	call.Output, call.Error = nil, json.RawMessage(`{"code":"invocation_failed","message":"boom"}`)
	ds := r.Match(r.Of("default", "a::b"), call, time.Now(), nil)
	if len(ds) != 1 || ds[0].Observer.Target.FunctionID != "t::err" || !strings.Contains(string(ds[0].Payload()), `"error":{"code":"invocation_failed"`) {
		t.Fatalf("on error: %v", ds)
	}
}

func TestMatchBoundsAndLifetime(t *testing.T) {
	r := NewRegistry(Limits{})
	once := add(t, r, "w1", `{"source": {"function_id": "a::b"}, "target": "t::x", "options": {"max_fires": 2}}`)
	slow := add(t, r, "w2", `{"source": {"function_id": "a::b"}, "target": "t::y", "options": {"max_in_flight": 1}}`)
	call := Call{FunctionID: "a::b", Namespace: "default", Input: json.RawMessage(`1`)}
	first := r.Match(r.Of("default", "a::b"), call, time.Now(), nil)
	if len(first) != 2 {
		t.Fatalf("first call fired %d", len(first))
	}
	second := r.Match(r.Of("default", "a::b"), call, time.Now(), nil) // slow's target still runs
	if len(second) != 1 || second[0].Observer != once || slow.dropped.Load() != 1 {
		t.Fatalf("second call: %v, dropped %d", second, slow.dropped.Load())
	}
	if r.Get(once.ID) != nil {
		t.Fatal("an observer past max_fires stays")
	}
	for _, d := range append(first, second...) {
		d.Done(false)
	}
	if n := r.RemoveOwner("w2"); n != 1 || r.Of("default", "a::b") != nil {
		t.Fatalf("RemoveOwner: %d, left %v", n, r.Of("default", "a::b"))
	}
	exp := add(t, r, "w1", `{"source": {"function_id": "a::b"}, "target": "t::x", "options": {"expires_in_ms": 10}}`)
	if ds := r.Match(r.Of("default", "a::b"), call, exp.Created.Add(time.Second), nil); len(ds) != 0 || r.Get(exp.ID) != nil {
		t.Fatalf("an expired observer fired or stayed: %v", ds)
	}
}

func TestAddKeepsIDsPerOwner(t *testing.T) {
	r := NewRegistry(Limits{})
	o1, _ := New(request(t, `{"source": {"function_id": "a::b"}, "target": "t::x", "options": {"id": "obs"}}`), "", "default", "default", time.Now())
	o1.Owner = "w1"
	o2, _ := New(request(t, `{"source": {"function_id": "c::d"}, "target": "t::x", "options": {"id": "obs"}}`), "", "default", "default", time.Now())
	o2.Owner = "w1"
	if _, err := r.Add(o1); err != nil {
		t.Fatal(err)
	}
	if replaced, err := r.Add(o2); err != nil || !replaced || r.Of("default", "a::b") != nil || len(r.Of("default", "c::d")) != 1 {
		t.Fatalf("replace: %v %v", replaced, err)
	}
	o3, _ := New(request(t, `{"source": {"function_id": "a::b"}, "target": "t::x", "options": {"id": "obs"}}`), "", "default", "default", time.Now())
	o3.Owner = "w2"
	if _, err := r.Add(o3); err != ErrIDTaken {
		t.Fatalf("another owner's id: %v", err)
	}
}

func TestAddBoundsObserversPerOwnerAndInAll(t *testing.T) {
	r := NewRegistry(Limits{PerOwner: 2, Total: 3})
	add(t, r, "w1", `{"source": {"function_id": "a::b"}, "target": "t::1"}`)
	add(t, r, "w1", `{"source": {"function_id": "a::b"}, "target": "t::2"}`)
	o, _ := New(request(t, `{"source": {"function_id": "a::b"}, "target": "t::3"}`), "x", "default", "default", time.Now())
	o.Owner = "w1"
	if _, err := r.Add(o); err != ErrOwnerLimit {
		t.Fatalf("a third observer of one owner: %v", err)
	}
	again, _ := New(request(t, `{"source": {"function_id": "a::b"}, "target": "t::3", "options": {"id": "w1-{\"source\": {\"function_id\": \"a::b\"}, \"target\": \"t::1\"}"}}`), "", "default", "default", time.Now())
	again.Owner = "w1"
	if replaced, err := r.Add(again); err != nil || !replaced {
		t.Fatalf("replacing an observer at the owner's bound: %v %v", replaced, err)
	}
	add(t, r, "w2", `{"source": {"function_id": "a::b"}, "target": "t::1"}`)
	o.Owner = "w3"
	if _, err := r.Add(o); err != ErrTotalLimit {
		t.Fatalf("an observer past the registry's bound: %v", err)
	}
	if n := r.RemoveOwner("w1"); n != 2 {
		t.Fatalf("RemoveOwner: %d", n)
	}
	if _, err := r.Add(o); err != nil {
		t.Fatalf("an observer once others left: %v", err)
	}
}

func TestMatchBoundsBytesInFlightAndSharesEncodings(t *testing.T) {
	r := NewRegistry(Limits{OwnerBytes: 3000})
	for i := range 4 {
		add(t, r, "w1", `{"source": {"function_id": "a::b"}, "target": "t::`+string(rune('a'+i))+`"}`)
	}
	in := json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)
	call := Call{FunctionID: "a::b", Namespace: "default", Input: in, Output: json.RawMessage(`1`)}
	ds := r.Match(r.Of("default", "a::b"), call, time.Now(), nil)
	if len(ds) != 2 {
		t.Fatalf("a 3000-byte budget took %d deliveries of over 1000 bytes", len(ds))
	}
	if &ds[0].body[0] != &ds[1].body[0] {
		t.Error("the deliveries of one call do not share the envelope's body")
	}
	var dropped int64
	for _, o := range r.List() {
		dropped += o.dropped.Load()
	}
	if dropped != 2 {
		t.Fatalf("dropped %d, want 2", dropped)
	}
	if r.InFlightBytes() <= 2000 {
		t.Fatalf("in flight %d bytes", r.InFlightBytes())
	}
	for _, d := range ds {
		var env map[string]any
		if err := json.Unmarshal(d.Payload(), &env); err != nil || env["observer_id"] != d.Observer.ID || env["input"] != strings.Repeat("x", 1000) {
			t.Fatalf("payload %s: %v", d.Payload(), err)
		}
		d.Done(false)
	}
	if r.InFlightBytes() != 0 {
		t.Fatalf("%d bytes left in flight after every delivery was done", r.InFlightBytes())
	}
	if ds := r.Match(r.Of("default", "a::b"), call, time.Now(), nil); len(ds) != 2 {
		t.Fatalf("after the budget was given back: %d deliveries", len(ds))
	} else {
		for _, d := range ds {
			d.Done(false)
		}
	}
}

func TestNewTimeout(t *testing.T) {
	o, err := New(request(t, `{"source": {"function_id": "a::b"}, "target": "t::x"}`), "x", "default", "default", time.Now())
	if err != nil || o.Timeout() != DefaultTargetTimeout {
		t.Fatalf("default timeout: %v %v", o, err)
	}
	o, err = New(request(t, `{"source": {"function_id": "a::b"}, "target": "t::x", "options": {"timeout_ms": 1500}}`), "x", "default", "default", time.Now())
	if err != nil || o.Timeout() != 1500*time.Millisecond {
		t.Fatalf("timeout_ms: %v %v", o, err)
	}
	if _, err := New(request(t, `{"source": {"function_id": "a::b"}, "target": "t::x", "options": {"timeout_ms": 600001}}`), "x", "default", "default", time.Now()); err == nil || !strings.Contains(err.Error(), "timeout_ms") {
		t.Fatalf("a timeout_ms past the bound: %v", err)
	}
}

func TestAddKeepsAShareForTrustedOwners(t *testing.T) {
	r := NewRegistry(Limits{Total: 4})
	if r.Limits().Restricted != 3 {
		t.Fatalf("restricted share %d, want 3 of 4", r.Limits().Restricted)
	}
	restricted := func(owner, target string) error {
		o, _ := New(request(t, `{"source": {"function_id": "a::b"}, "target": "`+target+`"}`), owner+target, "default", "default", time.Now())
		o.Owner, o.Restricted = owner, true
		_, err := r.Add(o)
		return err
	}
	for _, w := range []string{"s1", "s2", "s3"} {
		if err := restricted(w, "t::x"); err != nil {
			t.Fatal(err)
		}
	}
	if err := restricted("s4", "t::x"); err != ErrRestrictedLimit {
		t.Fatalf("a fourth session's observer: %v", err)
	}
	add(t, r, "trusted", `{"source": {"function_id": "a::b"}, "target": "t::y"}`)
	r.RemoveOwner("s1")
	if err := restricted("s4", "t::x"); err != nil {
		t.Fatalf("once a session left: %v", err)
	}
}
