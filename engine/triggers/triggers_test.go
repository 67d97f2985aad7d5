package triggers

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

type fakePeer struct {
	id  string
	mu  sync.Mutex
	got []*protocol.Message
}

func (p *fakePeer) ID() string         { return p.id }
func (p *fakePeer) WorkerName() string { return p.id + "-name" }
func (p *fakePeer) Send(m *protocol.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, m)
	return nil
}

// take returns "type id" of every frame received since the last take.
func (p *fakePeer) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []string{}
	for _, m := range p.got {
		s := m.Type + " " + m.ID
		if m.Error != nil {
			s += " " + m.Error.Code
		}
		out = append(out, s)
	}
	p.got = nil
	return out
}

func typ(id string) *protocol.Message {
	return &protocol.Message{Type: protocol.TypeRegisterTriggerType, ID: id, Description: id + " events"}
}

func trig(id, tt, fn string) *protocol.Message {
	return &protocol.Message{Type: protocol.TypeRegisterTrigger, ID: id, TriggerType: tt, FunctionID: fn, Config: json.RawMessage(`{"k":1}`)}
}

func result(id string, perr *protocol.Error) *protocol.Message {
	return &protocol.Message{Type: protocol.TypeTriggerRegistrationResult, ID: id, TriggerType: "cron", FunctionID: "f", Error: perr}
}

func want(t *testing.T, p *fakePeer, frames ...string) {
	t.Helper()
	if frames == nil {
		frames = []string{}
	}
	if d := cmp.Diff(frames, p.take()); d != "" {
		t.Errorf("frames to %s (-want +got):\n%s", p.id, d)
	}
}

func status(t *testing.T, r *Registry, id string) Status {
	t.Helper()
	for _, ti := range r.Triggers(Filter{IncludeRefused: true}) {
		if ti.ID == id {
			return ti.Status
		}
	}
	return ""
}

// A trigger registered before its provider is parked without an answer and sent when the
// provider registers; the provider's success makes it active and is not relayed.
func TestParkedUntilProvider(t *testing.T) {
	r := New(nil)
	consumer, provider := &fakePeer{id: "c"}, &fakePeer{id: "p"}
	r.Handle(consumer, "default", trig("t1", "cron", "jobs::tick"))
	want(t, consumer)
	if s := status(t, r, "t1"); s != Parked {
		t.Fatalf("status %s, want parked", s)
	}
	r.Handle(provider, "default", typ("cron"))
	want(t, provider, "registertrigger t1")
	if s := status(t, r, "t1"); s != Pending {
		t.Fatalf("status %s, want pending", s)
	}
	r.Handle(provider, "default", result("t1", nil))
	want(t, consumer)
	if s := status(t, r, "t1"); s != Active {
		t.Fatalf("status %s, want active", s)
	}
	got := r.Triggers(Filter{TriggerType: "cron"})
	if len(got) != 1 || got[0].Namespace != "default" || got[0].ProviderID != "p" || string(got[0].Config) != `{"k":1}` {
		t.Errorf("listing %+v", got)
	}
	if types := r.Types(); len(types) != 1 || types[0].ID != "cron" || types[0].WorkerID != "p" || types[0].InstanceCount != 1 {
		t.Errorf("types %+v", types)
	}
}

// The forwarded frame is the consumer's, with namespace naming where the function resolves.
func TestForwardedFrame(t *testing.T) {
	r := New(nil)
	consumer, provider := &fakePeer{id: "c"}, &fakePeer{id: "p"}
	r.Handle(provider, "default", typ("http"))
	m := trig("t1", "http", "api::get")
	m.Metadata = json.RawMessage(`{"team":"x"}`)
	r.Handle(consumer, "default", m)
	provider.mu.Lock()
	got := provider.got[0]
	provider.mu.Unlock()
	if got.FunctionID != "api::get" || got.TriggerType != "http" || string(got.Config) != `{"k":1}` || string(got.Metadata) != `{"team":"x"}` || got.NamespaceOr("") != "default" {
		t.Errorf("forwarded %+v", got)
	}
}

// Only the provider the trigger was sent to may answer for it; an error from it parks the
// trigger and reaches the consumer, and the next provider gets the trigger again.
func TestResultOnlyFromProvider(t *testing.T) {
	r := New(nil)
	consumer, provider, intruder := &fakePeer{id: "c"}, &fakePeer{id: "p"}, &fakePeer{id: "x"}
	r.Handle(provider, "default", typ("cron"))
	r.Handle(consumer, "default", trig("t1", "cron", "f"))
	want(t, provider, "registertrigger t1")
	r.Handle(intruder, "default", result("t1", protocol.NewError("EVIL", "no")))
	r.Handle(consumer, "default", result("t1", nil))
	want(t, consumer)
	if s := status(t, r, "t1"); s != Pending {
		t.Fatalf("status %s after results from others, want pending", s)
	}
	r.Handle(provider, "default", result("t1", protocol.NewError("INVALID_CRON_EXPRESSION", "bad")))
	want(t, consumer, "triggerregistrationresult t1 INVALID_CRON_EXPRESSION")
	if s := status(t, r, "t1"); s != Failed {
		t.Fatalf("status %s, want failed", s)
	}
	r.PeerGone(provider)
	next := &fakePeer{id: "p2"}
	r.Handle(next, "default", typ("cron"))
	want(t, next, "registertrigger t1")
}

// A provider that reconnects (a new connection) gets the triggers again; the consumer's
// disconnect removes them and tells the provider.
func TestReconnectAndOwnerGone(t *testing.T) {
	r := New(nil)
	consumer, p1 := &fakePeer{id: "c"}, &fakePeer{id: "p1"}
	r.Handle(p1, "default", typ("queue"))
	r.Handle(consumer, "default", trig("a", "queue", "f"))
	r.Handle(consumer, "default", trig("b", "queue", "g"))
	want(t, p1, "registertrigger a", "registertrigger b")
	r.PeerGone(p1)
	if s := status(t, r, "a"); s != Parked {
		t.Fatalf("status %s, want parked", s)
	}
	p2 := &fakePeer{id: "p2"}
	r.Handle(p2, "default", typ("queue"))
	want(t, p2, "registertrigger a", "registertrigger b")
	r.PeerGone(consumer)
	want(t, p2, "unregistertrigger a", "unregistertrigger b")
	if n := len(r.Triggers(Filter{IncludeRefused: true})); n != 0 {
		t.Errorf("%d triggers left", n)
	}
}

// A second provider of a type takes over: the first drops its triggers first.
func TestProviderTakeover(t *testing.T) {
	r := New(nil)
	consumer, p1, p2 := &fakePeer{id: "c"}, &fakePeer{id: "p1"}, &fakePeer{id: "p2"}
	r.Handle(p1, "default", typ("cron"))
	r.Handle(consumer, "default", trig("a", "cron", "f"))
	want(t, p1, "registertrigger a")
	r.Handle(p2, "default", typ("cron"))
	want(t, p1, "unregistertrigger a")
	want(t, p2, "registertrigger a")
	// p1 going away later changes nothing for p2.
	r.PeerGone(p1)
	want(t, p2)
	r.Handle(p2, "default", &protocol.Message{Type: protocol.TypeUnregisterTriggerType, ID: "cron"})
	want(t, p2, "unregistertrigger a")
	if s := status(t, r, "a"); s != Parked {
		t.Fatalf("status %s, want parked", s)
	}
}

// unregistertrigger from its owner reaches the provider; from anyone else it does nothing.
func TestUnregisterTrigger(t *testing.T) {
	r := New(nil)
	consumer, other, p := &fakePeer{id: "c"}, &fakePeer{id: "o"}, &fakePeer{id: "p"}
	r.Handle(p, "default", typ("cron"))
	r.Handle(consumer, "default", trig("a", "cron", "f"))
	p.take()
	r.Handle(other, "default", &protocol.Message{Type: protocol.TypeUnregisterTrigger, ID: "a"})
	want(t, p)
	r.Handle(consumer, "default", &protocol.Message{Type: protocol.TypeUnregisterTrigger, ID: "a", TriggerType: "cron"})
	want(t, p, "unregistertrigger a")
}

// Malformed triggers and a stolen id are refused to the sender with trigger_registration_failed.
func TestRefusals(t *testing.T) {
	r := New(nil)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	r.Handle(a, "default", trig("", "cron", "f"))
	r.Handle(a, "default", trig("x", "", "f"))
	want(t, a, "triggerregistrationresult  "+errcode.TriggerRegistrationFailed, "triggerregistrationresult x "+errcode.TriggerRegistrationFailed)
	r.Handle(a, "default", trig("t", "cron", "f"))
	r.Handle(b, "default", trig("t", "cron", "g"))
	want(t, b, "triggerregistrationresult t "+errcode.TriggerRegistrationFailed)
	if got := r.Triggers(Filter{IncludeRefused: true}); len(got) != 1 || got[0].FunctionID != "f" {
		t.Errorf("triggers %+v", got)
	}
}

// Providers are found in the trigger's namespace first, then in default.
func TestNamespaces(t *testing.T) {
	r := New(nil)
	consumer, pDef, pProj := &fakePeer{id: "c"}, &fakePeer{id: "pd"}, &fakePeer{id: "pp"}
	r.Handle(pDef, "default", typ("cron"))
	r.Handle(consumer, "proj", trig("a", "cron", "f"))
	want(t, pDef, "registertrigger a")
	r.Handle(pProj, "proj", typ("cron"))
	r.Handle(consumer, "proj", trig("b", "cron", "f"))
	want(t, pProj, "registertrigger b")
	r.Handle(consumer, "other", trig("c", "state", "f"))
	if s := status(t, r, "c"); s != Parked {
		t.Errorf("status %s, want parked", s)
	}
}

func TestUnsupported(t *testing.T) {
	m := Unsupported(&protocol.Message{Type: protocol.TypeObserve, ID: "obs-1"})
	if m.Type != protocol.TypeObserveResult || m.ID != "obs-1" || m.Error == nil || m.Error.Code != errcode.Unsupported {
		t.Errorf("%+v", m)
	}
}

// Listing answers iii's view by default, the active triggers only, with iii's config_summary;
// include_pending adds those not accepted yet, include_refused also the refused ones.
func TestListingFilters(t *testing.T) {
	r := New(nil)
	consumer, p := &fakePeer{id: "c"}, &fakePeer{id: "p"}
	r.Handle(p, "default", typ("cron"))
	for _, id := range []string{"ok", "sent", "bad"} {
		r.Handle(consumer, "default", trig(id, "cron", "f"))
	}
	r.Handle(consumer, "default", trig("parked", "queue", "f"))
	r.Handle(p, "default", result("ok", nil))
	r.Handle(p, "default", result("bad", protocol.NewError("INVALID_CRON_EXPRESSION", "no")))
	ids := func(f Filter) string {
		var out []string
		for _, ti := range r.Triggers(f) {
			out = append(out, ti.ID+"="+string(ti.Status))
		}
		return strings.Join(out, " ")
	}
	for f, want := range map[Filter]string{
		{}:                     "ok=active",
		{IncludePending: true}: "ok=active parked=parked sent=pending",
		{IncludeRefused: true}: "bad=failed ok=active parked=parked sent=pending",
	} {
		if got := ids(f); got != want {
			t.Errorf("%+v: %s, want %s", f, got, want)
		}
	}
	if got := r.Triggers(Filter{})[0].ConfigSummary; got != `{"k":1}` {
		t.Errorf("config_summary %q", got)
	}
}

func TestConfigSummary(t *testing.T) {
	long := `{"api_path": "/` + strings.Repeat("é", 100) + `"}`
	for in, want := range map[string]string{
		``:                                  `null`,
		`null`:                              `null`,
		`{ "a" : [1, 2] }`:                  `{"a":[1,2]}`,
		long:                                `{"api_path":"/` + strings.Repeat("é", SummaryMax-14) + `…`,
		`"` + strings.Repeat("x", 78) + `"`: `"` + strings.Repeat("x", 78) + `"`,
	} {
		if got := ConfigSummary(json.RawMessage(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
