package protocol

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/internal/wire"
)

// TestInvocationIDsAreUUIDs: the SDK's invocation ids (its registration and its calls) are
// UUIDs, the type iii's engine decodes them as.
func TestInvocationIDsAreUUIDs(t *testing.T) {
	ids := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ws, err := batchconn.Accept(rw, r, time.Second)
		if err != nil {
			return
		}
		defer ws.Close()
		q := batchconn.NewQueue(ws, false, 0, 0)
		go func() { _ = q.Run() }()
		defer q.Stop(errors.New("done"))
		for {
			_, b, err := ws.ReadMessage(nil, nil)
			if err != nil {
				return
			}
			m, err := Decode(b)
			if err != nil || m.Type != TypeInvokeFunction {
				continue
			}
			ids <- m.InvocationID
			_ = q.Push(wire.AppendEncode(q.Buf(), &Message{Type: TypeInvocationResult, InvocationID: m.InvocationID, Result: []byte(`{"success":true}`)}))
		}
	}))
	t.Cleanup(srv.Close)
	w := NewWorker(Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http"), Name: "t", NoReconnect: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for range 2 {
		if _, err := w.Call(ctx, "any::fn", nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		id := <-ids
		if _, err := uuid.Parse(id); err != nil {
			t.Errorf("invocation id %q: %v", id, err)
		}
	}
}
