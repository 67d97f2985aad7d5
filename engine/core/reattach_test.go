package core

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

// TestReattachRetiresThePreviousConnection: a reattach frame carrying the token the engine sent
// on the previous connection closes that connection and forgets its functions before the
// frames after it are read, so the registration that follows is the only one; a wrong or
// missing token retires nothing.
func TestReattachRetiresThePreviousConnection(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	old := dialRawWorker(t, url)
	reg := old.next(t, protocol.TypeWorkerRegistered)
	oldID, token := str(reg["worker_id"]), str(reg["reattach_token"])
	if _, err := uuid.Parse(token); err != nil {
		t.Fatalf("reattach_token %q: %v", token, err)
	}
	if err := rawSend(t, old.c, map[string]any{"type": protocol.TypeRegisterFunction, "id": "raw::fn"}); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "raw::fn registered", 20*time.Second, func() bool { _, ok := e.Lookup("default", "raw::fn"); return ok })

	// Another connection that knows the id (it is public) but not the token retires nothing.
	other := dialRawWorker(t, url)
	other.next(t, protocol.TypeWorkerRegistered)
	for _, tok := range []string{"", uuid.NewString()} {
		if err := rawSend(t, other.c, map[string]any{"type": protocol.TypeReattach, "previous_worker_id": oldID, "reattach_token": tok}); err != nil {
			t.Fatal(err)
		}
	}
	// Frames are handled in order: once the ping is answered the reattach frames were.
	if err := rawSend(t, other.c, map[string]any{"type": protocol.TypePing}); err != nil {
		t.Fatal(err)
	}
	other.next(t, protocol.TypePong)
	if w, ok := e.Lookup("default", "raw::fn"); !ok || w != oldID {
		t.Fatalf("after a reattach without the token, raw::fn is served by %q (%v), want %s", w, ok, oldID)
	}

	// The reconnecting worker: reattach, then its registration again, at once.
	next := dialRawWorker(t, url)
	newID := str(next.next(t, protocol.TypeWorkerRegistered)["worker_id"])
	if err := rawSend(t, next.c, map[string]any{"type": protocol.TypeReattach, "previous_worker_id": oldID, "reattach_token": token}); err != nil {
		t.Fatal(err)
	}
	if err := rawSend(t, next.c, map[string]any{"type": protocol.TypeRegisterFunction, "id": "raw::fn"}); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "raw::fn served by the new connection", 20*time.Second, func() bool { w, _ := e.Lookup("default", "raw::fn"); return w == newID })
	select {
	case <-e.WorkerGone(oldID):
	default:
		t.Fatal("the previous connection is still there")
	}
	for range old.got { // its socket was closed
	}
}
