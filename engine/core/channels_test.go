package core

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
)

func channelPair(t *testing.T, w *protocol.Worker, payload any) protocol.ChannelPair {
	t.Helper()
	raw, err := w.Call(context.Background(), protocol.FnCreateChannel, payload)
	if err != nil {
		t.Fatal(err)
	}
	var p protocol.ChannelPair
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitChannels polls until the engine holds n channels.
func waitChannels(t *testing.T, e *Engine, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.ChannelCount() != n {
		if time.Now().After(deadline) {
			t.Fatalf("engine holds %d channels, want %d", e.ChannelCount(), n)
		}
		pollPause()
	}
}

// pollPause is the interval between two polls of a condition with a deadline.
func pollPause() { <-time.After(5 * time.Millisecond) }

func abortDetail(t *testing.T, err error) string {
	t.Helper()
	var ae *protocol.ChannelAbortedError
	if !errors.As(err, &ae) {
		t.Fatalf("want a ChannelAbortedError, got %v", err)
	}
	return ae.Detail
}

func TestChannelRoundTrip(t *testing.T) {
	e, url := startEngine(t, Options{})
	w := worker(t, url, "default", nil)
	p := channelPair(t, w, map[string]any{})
	if p.Reader.Direction != "read" || p.Writer.Direction != "write" || p.Reader.ChannelID != p.ChannelID ||
		p.Reader.AccessKey == p.Writer.AccessKey || len(p.Reader.AccessKey) != 64 {
		t.Fatalf("bad pair %+v", p)
	}
	want := make([]byte, 3<<20+17)
	_, _ = rand.Read(want)
	ctx := context.Background()
	wr, err := w.OpenWriter(ctx, p.Writer)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		if _, err := wr.Write(want); err != nil {
			errc <- err
			return
		}
		errc <- wr.Close()
	}()
	rd, err := w.OpenReader(ctx, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	rd.Close()
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d (equal prefix: %v)", len(got), len(want), bytes.HasPrefix(want, got))
	}
	waitChannels(t, e, 0)
}

func TestChannelAccess(t *testing.T) {
	_, url := startEngine(t, Options{})
	w := worker(t, url, "default", nil)
	p := channelPair(t, w, nil)
	ctx := context.Background()
	bad := p.Reader
	bad.AccessKey = strings.Repeat("0", 64)
	if _, err := protocol.DialReader(ctx, url, bad); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("wrong key: %v", err)
	}
	unknown := p.Reader
	unknown.ChannelID = "nope"
	if _, err := protocol.DialReader(ctx, url, unknown); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("unknown channel: %v", err)
	}
	if _, err := protocol.DialWriter(ctx, url, p.Reader); err == nil || !strings.Contains(err.Error(), "direction") {
		t.Fatalf("direction check: %v", err)
	}
	first, err := protocol.DialReader(ctx, url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := protocol.DialReader(ctx, url, p.Reader); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("second reader: %v", err)
	}
	for _, in := range []any{map[string]int{"buffer_size": 0}, map[string]int{"buffer_size": MaxChannelBuffer + 1}, "x"} {
		if _, err := w.Call(ctx, protocol.FnCreateChannel, in); code(err) != errcode.InvalidArguments {
			t.Fatalf("%v: %v", in, err)
		}
	}
}

func TestChannelWriterAbort(t *testing.T) {
	e, url := startEngine(t, Options{})
	w := worker(t, url, "default", nil)
	p := channelPair(t, w, nil)
	ctx := context.Background()
	wr, err := protocol.DialWriter(ctx, url, p.Writer)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := protocol.DialReader(ctx, url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := wr.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(rd, buf); err != nil || string(buf) != "partial" {
		t.Fatalf("%q %v", buf, err)
	}
	if err := wr.Abort("disk on fire"); err != nil {
		t.Fatal(err)
	}
	_, err = rd.Read(buf)
	if d := abortDetail(t, err); d != "writer aborted: disk on fire" {
		t.Fatalf("detail %q", d)
	}
	waitChannels(t, e, 0)
}

// rawWriter dials the writer end of a channel as a bare WebSocket, for tests that misbehave.
func rawWriter(t *testing.T, url string, ref protocol.ChannelRef) *websocket.Conn {
	t.Helper()
	u, err := protocol.ChannelURL(url, ref)
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := websocket.Dial(context.Background(), u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestChannelWriterDrops(t *testing.T) {
	_, url := startEngine(t, Options{})
	w := worker(t, url, "default", nil)
	p := channelPair(t, w, nil)
	ctx := context.Background()
	raw := rawWriter(t, url, p.Writer)
	rd, err := protocol.DialReader(ctx, url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := raw.Write(ctx, websocket.MessageText, []byte("text frames count too")); err != nil {
		t.Fatal(err)
	}
	raw.CloseNow()
	got, err := io.ReadAll(rd)
	if string(got) != "text frames count too" {
		t.Fatalf("got %q", got)
	}
	if d := abortDetail(t, err); !strings.Contains(d, "writer closed the channel abnormally") {
		t.Fatalf("detail %q", d)
	}
}

func TestChannelFrameLimit(t *testing.T) {
	_, url := startEngine(t, Options{})
	w := worker(t, url, "default", nil)
	p := channelPair(t, w, nil)
	ctx := context.Background()
	raw := rawWriter(t, url, p.Writer)
	defer raw.CloseNow()
	rd, err := protocol.DialReader(ctx, url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	_ = raw.Write(ctx, websocket.MessageBinary, make([]byte, protocol.MaxChannelFrame+1))
	_, err = io.ReadAll(rd)
	if d := abortDetail(t, err); !strings.Contains(d, "a frame larger than 1048576 bytes") {
		t.Fatalf("detail %q", d)
	}
}

func TestChannelReaderLeaves(t *testing.T) {
	e, url := startEngine(t, Options{})
	w := worker(t, url, "default", nil)
	p := channelPair(t, w, map[string]int{"buffer_size": 1})
	ctx := context.Background()
	wr, err := protocol.DialWriter(ctx, url, p.Writer)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	rd, err := protocol.DialReader(ctx, url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rd.Close()
	chunk := make([]byte, protocol.ChannelChunk)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := wr.Write(chunk)
		if err != nil {
			abortDetail(t, err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes kept succeeding after the reader left")
		}
	}
	waitChannels(t, e, 0)
}

func TestChannelIdleDeadline(t *testing.T) {
	e, url := startEngine(t, Options{ChannelIdle: 100 * time.Millisecond})
	w := worker(t, url, "default", nil)
	p := channelPair(t, w, nil)
	waitChannels(t, e, 0) // nobody connected: forgotten
	if _, err := protocol.DialReader(context.Background(), url, p.Reader); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("expired channel: %v", err)
	}
	p = channelPair(t, w, nil)
	rd, err := protocol.DialReader(context.Background(), url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	_, err = rd.Read(make([]byte, 1))
	if d := abortDetail(t, err); !strings.Contains(d, "idle") {
		t.Fatalf("detail %q", d)
	}
	waitChannels(t, e, 0)
}

func TestChannelShutdownAborts(t *testing.T) {
	_, url, stop := serveEngine(t, Options{})
	w := protocol.NewWorker(protocol.Config{URL: url, Name: "t", NoReconnect: true})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := channelPair(t, w, nil)
	rd, err := protocol.DialReader(context.Background(), url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	stop()
	_, err = rd.Read(make([]byte, 1))
	if d := abortDetail(t, err); !strings.Contains(d, "shutting down") {
		t.Fatalf("detail %q", d)
	}
}

// BenchmarkChannel10MiB moves 10 MiB through a channel per iteration.
func BenchmarkChannel10MiB(b *testing.B) {
	_, url, _ := serveEngine(b, Options{})
	w := protocol.NewWorker(protocol.Config{URL: url, Name: "bench", NoReconnect: true})
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	data := make([]byte, 10<<20)
	_, _ = rand.Read(data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r, wref, err := w.CreateChannel(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		wr, err := w.OpenWriter(context.Background(), wref)
		if err != nil {
			b.Fatal(err)
		}
		go func() { _, _ = wr.Write(data); wr.Close() }()
		rd, err := w.OpenReader(context.Background(), r)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rd)
		if err != nil || n != int64(len(data)) {
			b.Fatal(n, err)
		}
		rd.Close()
	}
}
