package core

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

func answers(name string) map[string]protocol.Handler {
	return map[string]protocol.Handler{"pool::who": func(context.Context, json.RawMessage) (any, error) { return name, nil }}
}

// Two workers that register one function both serve it; when one leaves the other takes every
// call, and the function goes with the last.
func TestSeveralWorkersServeOneFunction(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	w1 := enginetest.Worker(t, url, "default", answers("one"))
	w2 := enginetest.Worker(t, url, "default", answers("two"))
	cl := enginetest.Worker(t, url, "default", nil)
	ctx := context.Background()
	seen := map[string]int{}
	for range 40 {
		out, err := cl.Call(ctx, "pool::who", nil)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(out)]++
	}
	if seen[`"one"`] == 0 || seen[`"two"`] == 0 {
		t.Fatalf("calls were not spread: %v", seen)
	}
	w1.Close()
	enginetest.Eventually(t, "the survivor to take the function over", 5*time.Second, func() bool {
		id, ok := e.Lookup("default", "pool::who")
		return ok && id == w2.WorkerID()
	})
	for range 10 {
		if out, err := cl.Call(ctx, "pool::who", nil); err != nil || string(out) != `"two"` {
			t.Fatalf("after one left: %s, %v", out, err)
		}
	}
	w2.Close()
	enginetest.Eventually(t, "the function to go with its last worker", 5*time.Second, func() bool {
		_, ok := e.Lookup("default", "pool::who")
		return !ok
	})
}

// A worker that disconnects mid-call fails only the calls it was serving, with
// invocation_stopped; the calls the other instance serves succeed. Calls go to the instance
// with fewer calls in flight, so the blocked one gets no more than its share.
func TestInstanceLeavingFailsOnlyItsCalls(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	held := make(chan struct{}, 16)
	stuck := enginetest.Worker(t, url, "default", map[string]protocol.Handler{"pool::who": func(ctx context.Context, _ json.RawMessage) (any, error) {
		held <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	enginetest.Worker(t, url, "default", answers("two"))
	cl := enginetest.Worker(t, url, "default", nil)
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := cl.Call(context.Background(), "pool::who", nil, protocol.WithTimeout(10*time.Second))
			errs <- err
		})
	}
	<-held
	stuck.Close()
	wg.Wait()
	close(errs)
	ok, stopped := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case code(err) == errcode.InvocationStopped:
			stopped++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if ok == 0 || stopped == 0 || ok+stopped != n {
		t.Fatalf("ok %d, stopped %d of %d", ok, stopped, n)
	}
}

// Only a worker with the same rights joins: another token, another protection or an
// HTTP-invoked function is the conflict it was.
func TestSameRights(t *testing.T) {
	plain := &protocol.Message{ID: "f"}
	f := &fnEntry{conn: &conn{token: "t1"}, frame: plain}
	if !sameRights(f, &conn{token: "t1"}, plain) {
		t.Error("same token refused")
	}
	if sameRights(f, &conn{token: "t2"}, plain) || sameRights(f, &conn{}, plain) {
		t.Error("another token admitted")
	}
	if sameRights(f, &conn{token: "t1"}, &protocol.Message{ID: "f", Protected: true}) {
		t.Error("another protection admitted")
	}
	if !sameRights(&fnEntry{conn: &conn{}, frame: plain}, &conn{}, plain) {
		t.Error("two workers without a token refused")
	}
	if sameRights(&fnEntry{conn: &conn{}, frame: plain}, &conn{l: &listener{}}, plain) {
		t.Error("a worker of another listener admitted")
	}
	if sameRights(&fnEntry{conn: &conn{}, frame: plain}, &conn{session: &rbac.Session{}}, plain) {
		t.Error("a gated session admitted")
	}
}

// A call that reaches a worker after it unregistered the function (a rolling deploy's old
// instance drops its handler, and the SDK answers function_not_found) goes to another
// instance; a worker that still serves the function and answers function_not_found is
// answered as it said.
func TestRaceWithUnregistrationIsRerouted(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	var old *protocol.Worker
	var oldCalls atomic.Int32
	old = enginetest.Worker(t, url, "default", map[string]protocol.Handler{"pool::who": func(context.Context, json.RawMessage) (any, error) {
		oldCalls.Add(1)
		if err := old.Unregister("pool::who"); err != nil {
			return nil, err
		}
		return nil, protocol.NewError(errcode.FunctionNotFound, "Function not found")
	}})
	enginetest.Worker(t, url, "default", answers("two"))
	cl := enginetest.Worker(t, url, "default", nil)
	for i := range 20 {
		out, err := cl.Call(context.Background(), "pool::who", nil, protocol.WithTimeout(10*time.Second))
		if err != nil || string(out) != `"two"` {
			t.Fatalf("call %d: %s, %v", i, out, err)
		}
	}
	if oldCalls.Load() == 0 {
		t.Fatal("no call reached the old instance: the test proves nothing")
	}

	// Still registered, the worker's own function_not_found is the answer.
	liar := func(context.Context, json.RawMessage) (any, error) {
		return nil, protocol.NewError(errcode.FunctionNotFound, "Function not found")
	}
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{"pool::liar": liar})
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{"pool::liar": liar})
	if _, err := cl.Call(context.Background(), "pool::liar", nil); code(err) != errcode.FunctionNotFound {
		t.Fatalf("a worker that still serves the function: %v", err)
	}
}
