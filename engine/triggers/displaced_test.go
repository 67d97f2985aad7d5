package triggers

import (
	"testing"

	"github.com/iii-go/iii/engine/protocol"
)

// gatedPeer is a peer holding a session of a gated listener.
type gatedPeer struct{ fakePeer }

func (*gatedPeer) Gated() bool { return true }

// A provider displaced by another gets the type, and its triggers, back when the one that
// displaced it leaves, or unregisters the type; before, the type stayed without a provider and
// its triggers parked until the displaced worker restarted.
func TestDisplacedProviderRestored(t *testing.T) {
	r := New(nil)
	consumer, first, second := &fakePeer{id: "c"}, &fakePeer{id: "p1"}, &fakePeer{id: "p2"}
	r.Handle(first, "default", typ("http"))
	r.Handle(consumer, "default", trig("t1", "http", "api::get"))
	want(t, first, "registertrigger t1")
	r.Handle(second, "default", typ("http"))
	want(t, first, "unregistertrigger t1")
	want(t, second, "registertrigger t1")
	r.PeerGone(second)
	want(t, first, "registertrigger t1")
	if types := r.Types(); len(types) != 1 || types[0].WorkerID != "p1" {
		t.Fatalf("types after the displacing provider left: %+v", types)
	}

	third := &fakePeer{id: "p3"}
	r.Handle(third, "default", typ("http"))
	want(t, first, "unregistertrigger t1")
	want(t, third, "registertrigger t1")
	r.Handle(third, "default", unregType("http"))
	want(t, third, "unregistertrigger t1")
	want(t, first, "registertrigger t1")

	// A displaced provider that left is not restored.
	fourth := &fakePeer{id: "p4"}
	r.Handle(fourth, "default", typ("http"))
	r.PeerGone(first)
	r.PeerGone(fourth)
	if types := r.Types(); len(types) != 0 {
		t.Errorf("types after both providers left: %+v", types)
	}
	if s := status(t, r, "t1"); s != Parked {
		t.Errorf("t1 is %s, want parked", s)
	}
}

// A session of a gated listener may not take a trigger type over from a trusted provider: it
// would receive every trigger of the type and stop them firing. It may take one over from
// another session.
func TestGatedPeerMayNotDisplaceTrusted(t *testing.T) {
	r := New(nil)
	consumer, trusted := &fakePeer{id: "c"}, &fakePeer{id: "http-worker"}
	session, other := &gatedPeer{fakePeer{id: "s"}}, &gatedPeer{fakePeer{id: "s2"}}
	r.Handle(trusted, "default", typ("http"))
	r.Handle(consumer, "default", trig("t1", "http", "api::get"))
	want(t, trusted, "registertrigger t1")
	r.Handle(session, "default", typ("http"))
	want(t, trusted)
	want(t, &session.fakePeer)
	if types := r.Types(); len(types) != 1 || types[0].WorkerID != "http-worker" {
		t.Fatalf("types: %+v", types)
	}
	r.Handle(session, "default", typ("mine"))
	r.Handle(other, "default", typ("mine"))
	if types := r.Types(); len(types) != 2 || types[1].WorkerID != "s2" {
		t.Errorf("a session displacing another: %+v", types)
	}
}

func unregType(id string) *protocol.Message {
	return &protocol.Message{Type: protocol.TypeUnregisterTriggerType, ID: id}
}
