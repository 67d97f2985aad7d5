package batchconn

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// benchPayload is the ~90-byte JSON frame of the peer bench.
var benchPayload = []byte(`{"type":"invocationresult","invocation_id":"5f2b9c1e04a7-1k2j","function_id":"bench::echo","result":{"sandbox_id":"0d6f8c1e-3a1b-4c55-9a4e-0d2f7a1b9c10","cmd":"echo","args":["hello"]}}`)

// BenchmarkRead: a server reading the masked frames a client sends in runs of 64 (as the SDK's
// writer sends them under load), per message: this package's ReadMessage against
// coder/websocket's Reader, which it replaced on the worker connection.
func BenchmarkRead(b *testing.B) {
	b.Run("batchconn", func(b *testing.B) {
		accepted := make(chan *Conn, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, err := Accept(w, r, 0); err == nil {
				accepted <- c
			}
		}))
		defer srv.Close()
		cl := benchClient(b, srv.URL)
		s := <-accepted
		defer s.Close()
		benchRead(b, cl, func(buf []byte) ([]byte, error) {
			_, m, err := s.ReadMessage(buf, nil)
			return m, err
		})
	})
	b.Run("coder", func(b *testing.B) {
		accepted := make(chan *websocket.Conn, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, err := websocket.Accept(w, r, nil); err == nil {
				accepted <- c
				<-r.Context().Done()
			}
		}))
		defer srv.Close()
		cl := benchClient(b, srv.URL)
		s := <-accepted
		defer s.CloseNow()
		benchRead(b, cl, func(buf []byte) ([]byte, error) { // as the engine read before
			_, r, err := s.Reader(context.Background())
			if err != nil {
				return nil, err
			}
			m := buf[:0]
			for {
				if len(m) == cap(m) {
					m = append(m, 0)[:len(m)]
				}
				n, err := r.Read(m[len(m):cap(m)])
				m = m[:len(m)+n]
				if err != nil {
					if err == io.EOF {
						return m, nil
					}
					return nil, err
				}
			}
		})
	})
}

func benchClient(b *testing.B, url string) *Conn {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Dial(ctx, "ws"+strings.TrimPrefix(url, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl
}

func benchRead(b *testing.B, cl *Conn, read func([]byte) ([]byte, error)) {
	run := make([][]byte, 64)
	for i := range run {
		run[i] = benchPayload
	}
	n := b.N
	sent := make(chan error, 1)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPayload)))
	b.ResetTimer()
	go func() {
		for left := n; left > 0; left -= len(run) {
			if err := cl.WriteText(run[:min(left, len(run))], true); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	var buf []byte
	for range n {
		m, err := read(buf)
		if err != nil {
			b.Fatal(err)
		}
		buf = m
	}
	if err := <-sent; err != nil {
		b.Fatal(err)
	}
}
