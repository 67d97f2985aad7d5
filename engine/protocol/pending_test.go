package protocol

import (
	"context"
	"errors"
	"github.com/iii-go/iii/internal/base/poll"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/internal/wire"
	"github.com/iii-go/iii/internal/base/errcode"
)

func TestPendingSettleOnce(t *testing.T) {
	var p pendingCalls
	pc := p.add("a-1", time.Hour, nil)
	m := &Message{Type: TypeInvocationResult, InvocationID: "a-1"}
	if !p.settle("a-1", m) {
		t.Fatal("settle of a pending call reported false")
	}
	if p.settle("a-1", m) || p.take("a-1") != nil {
		t.Fatal("a settled call was settled or taken again")
	}
	if got := <-pc.ch; got != m {
		t.Fatalf("got %v, want the reply", got)
	}
	p.release(pc)
	if n := p.len(); n != 0 {
		t.Fatalf("%d calls pending after the only call settled", n)
	}
}

func TestPendingSettleAllAndSweep(t *testing.T) {
	var p pendingCalls
	due := p.add("b-1", 0, nil)
	p.add("b-2", time.Hour, nil)
	if got := <-due.ch; got != callExpired {
		t.Fatalf("a call past its deadline got %v, want callExpired", got)
	}
	if p.take("b-2") == nil {
		// The sweeper must leave a call before its deadline alone.
		t.Fatal("a call before its deadline was settled")
	}
	ended := make(chan struct{})
	close(ended)
	if got := <-p.add("b-4", time.Hour, ended).ch; got != callExpired {
		t.Fatalf("a call whose context ended got %v, want callExpired", got)
	}
	gone := p.add("b-3", time.Hour, nil)
	p.settleAll()
	if got := <-gone.ch; got != nil {
		t.Fatalf("a call on a lost connection got %v, want nil", got)
	}
	if !poll.Until(5*time.Second, func() bool { return !p.sweeping.Load() }) {
		t.Fatal("the sweeper still runs with no call pending")
	}
}

// silentEngine is a stand-in engine that accepts a worker's registration and then reads frames
// without answering them; closing the returned channel drops the connection.
func silentEngine(t *testing.T) (url string, drop chan struct{}, invoked chan string) {
	drop, invoked = make(chan struct{}), make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ws, err := batchconn.Accept(rw, r, time.Second)
		if err != nil {
			return
		}
		defer ws.Close()
		q := batchconn.NewQueue(ws, false, 0, 0)
		go func() { _ = q.Run() }()
		defer q.Stop(errors.New("done"))
		go func() { <-drop; _ = ws.Close() }()
		for {
			_, b, err := ws.ReadMessage(nil, nil)
			if err != nil {
				return
			}
			m, err := Decode(b)
			if err != nil || m.Type != TypeInvokeFunction {
				continue
			}
			if m.FunctionID == FnRegisterWorker {
				_ = q.Push(wire.AppendEncode(q.Buf(), &Message{Type: TypeInvocationResult, InvocationID: m.InvocationID, Result: []byte(`{"success":true}`)}))
				continue
			}
			invoked <- m.FunctionID
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), drop, invoked
}

func startSilent(t *testing.T) (*Worker, chan struct{}, chan string) {
	url, drop, invoked := silentEngine(t)
	w := NewWorker(Config{URL: url, Name: "t", NoReconnect: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, drop, invoked
}

func errCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// A call the engine never answers ends with the SDK's own TIMEOUT (no per-call timer: the
// sweeper settles it), whether its context has a Done channel or not, and leaves nothing pending.
func TestCallExpiresWithoutReply(t *testing.T) {
	w, _, invoked := startSilent(t)
	_, err := w.Call(context.Background(), "silent::fn", nil, WithTimeout(10*time.Millisecond))
	if errCode(err) != errcode.ClientTimeout {
		t.Fatalf("background context: got %v, want %s", err, errcode.ClientTimeout)
	}
	<-invoked
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = w.Call(ctx, "silent::fn", nil, WithTimeout(10*time.Millisecond))
	if errCode(err) != errcode.ClientTimeout {
		t.Fatalf("cancellable context: got %v, want %s", err, errcode.ClientTimeout)
	}
	<-invoked
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = w.Call(ctx, "silent::fn", nil)
	if errCode(err) != errcode.ClientTimeout {
		t.Fatalf("context deadline: got %v, want %s", err, errcode.ClientTimeout)
	}
	ctx, cancel = context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := w.Call(ctx, "silent::fn", nil, WithTimeout(time.Hour))
		errc <- err
	}()
	<-invoked
	cancel()
	if err := <-errc; errCode(err) != errcode.ClientTimeout {
		t.Fatalf("cancelled context: got %v, want %s", err, errcode.ClientTimeout)
	}
	if n := w.pending.len(); n != 0 {
		t.Fatalf("%d calls still pending", n)
	}
}

// A call pending when the connection drops ends with NOT_CONNECTED at once.
func TestCallFailsOnLostConnection(t *testing.T) {
	w, drop, invoked := startSilent(t)
	errc := make(chan error, 1)
	go func() {
		_, err := w.Call(context.Background(), "silent::fn", nil, WithTimeout(time.Hour))
		errc <- err
	}()
	<-invoked
	close(drop)
	if err := <-errc; errCode(err) != errcode.NotConnected {
		t.Fatalf("got %v, want %s", err, errcode.NotConnected)
	}
}
