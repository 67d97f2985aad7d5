package core

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/protocol"
)

// BenchmarkConnWriter: frames queued with conn.send and written by the connection's writer
// (batchconn.Queue) to a peer that reads them with batchconn.ReadMessage into one buffer, as
// the SDK does, per frame.
func BenchmarkConnWriter(b *testing.B) {
	e := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), QueueFrames: 1 << 30, QueueBytes: 1 << 30})
	url := enginetest.Start(b, e).URL
	ctx := context.Background()
	peer, err := batchconn.Dial(ctx, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer peer.Close()
	if _, _, err := peer.ReadMessage(nil, nil); err != nil { // workerregistered: the connection is in e.conns
		b.Fatal(err)
	}
	var c *conn
	e.mu.RLock()
	for _, x := range e.conns {
		c = x
	}
	e.mu.RUnlock()
	if c == nil {
		b.Fatal("no connection")
	}
	m := &protocol.Message{Type: protocol.TypeInvocationResult, InvocationID: "5f2b9c1e04a7-1k2j", FunctionID: "bench::echo",
		Result: []byte(`{"sandbox_id":"0d6f8c1e-3a1b-4c55-9a4e-0d2f7a1b9c10","cmd":"echo","args":["hello"]}`)}
	n := b.N
	read := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		var buf []byte
		for range n {
			_, m, err := peer.ReadMessage(buf, nil)
			if err != nil {
				read <- err
				return
			}
			buf = m
		}
		read <- nil
	}()
	for range n {
		if err := c.send(m); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
}
