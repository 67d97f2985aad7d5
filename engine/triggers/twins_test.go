package triggers

import (
	"encoding/json"
	"testing"

	"github.com/iii-go/iii/engine/protocol"
)

// Two instances of one worker register the same trigger (each under its own id): the provider
// hears of it once. The owner leaving hands it to the twin with no frame to the provider; the
// last one leaving unregisters it there.
func TestTwinsFireOnce(t *testing.T) {
	r := New(nil)
	a, b, provider := &fakePeer{id: "a"}, &fakePeer{id: "b"}, &fakePeer{id: "p"}
	r.Handle(provider, "default", typ("cron"))
	r.Handle(a, "default", trig("ta", "cron", "jobs::tick"))
	b2 := trig("tb", "cron", "jobs::tick")
	b2.Config = json.RawMessage(` { "k" : 1 } `) // the same value, spelled otherwise
	r.Handle(b, "default", b2)
	want(t, provider, "registertrigger ta")
	want(t, b)
	r.Handle(provider, "default", result("ta", nil))
	if got := r.Triggers(Filter{}); len(got) != 1 || got[0].WorkerID != "a" {
		t.Fatalf("listing %+v", got)
	}

	r.PeerGone(a)
	want(t, provider)
	if got := r.Triggers(Filter{}); len(got) != 1 || got[0].WorkerID != "b" || got[0].Status != Active {
		t.Fatalf("after the owner left: %+v", got)
	}
	r.Handle(b, "default", &protocol.Message{Type: protocol.TypeUnregisterTrigger, ID: "tb"})
	want(t, provider, "unregistertrigger ta")
	if got := r.Triggers(Filter{IncludeRefused: true}); len(got) != 0 {
		t.Fatalf("after the last twin left: %+v", got)
	}
}

// A different config, function or namespace is another trigger; a twin that unregisters
// leaves the owner's trigger alone.
func TestTwinsOnlyWhenIdentical(t *testing.T) {
	r := New(nil)
	a, b, provider := &fakePeer{id: "a"}, &fakePeer{id: "b"}, &fakePeer{id: "p"}
	r.Handle(provider, "default", typ("cron"))
	r.Handle(a, "default", trig("ta", "cron", "jobs::tick"))
	other := trig("tb", "cron", "jobs::tick")
	other.Config = json.RawMessage(`{"k":2}`)
	r.Handle(b, "default", other)
	r.Handle(b, "default", trig("tc", "cron", "jobs::tock"))
	r.Handle(b, "default", trig("td", "cron", "jobs::tick"))
	want(t, provider, "registertrigger ta", "registertrigger tb", "registertrigger tc")
	r.Handle(b, "default", &protocol.Message{Type: protocol.TypeUnregisterTrigger, ID: "td"})
	want(t, provider)
	if s := status(t, r, "ta"); s != Pending {
		t.Fatalf("the owner's trigger: %s", s)
	}
}
