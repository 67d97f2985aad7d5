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

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
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
	if !enginetest.Poll(5*time.Second, func() bool { return e.ChannelCount() == n }) {
		t.Fatalf("engine holds %d channels, want %d", e.ChannelCount(), n)
	}
}

func abortDetail(t *testing.T, err error) string {
	t.Helper()
	var ae *protocol.ChannelAbortedError
	if !errors.As(err, &ae) {
		t.Fatalf("want a ChannelAbortedError, got %v", err)
	}
	return ae.Detail
}

func TestChannelRoundTrip(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
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
	url := enginetest.Start(t, New(Options{})).URL
	w := enginetest.Worker(t, url, "default", nil)
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
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
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
	url := enginetest.Start(t, New(Options{})).URL
	w := enginetest.Worker(t, url, "default", nil)
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
	url := enginetest.Start(t, New(Options{})).URL
	w := enginetest.Worker(t, url, "default", nil)
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
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
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
	e := New(Options{ChannelIdle: 100 * time.Millisecond})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
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
	srv := enginetest.Start(t, New(Options{}))
	url, stop := srv.URL, srv.Stop
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
	url := enginetest.Start(b, New(Options{})).URL
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

// writeFrames writes n binary frames of size bytes to a raw writer end in the background; its
// writes block while the engine holds the channel's buffer full (back-pressure).
func writeFrames(raw *websocket.Conn, n, size int, closeAfter bool) {
	go func() {
		b := make([]byte, size)
		for range n {
			if raw.Write(context.Background(), websocket.MessageBinary, b) != nil {
				return
			}
		}
		if closeAfter {
			raw.Close(websocket.StatusNormalClosure, "")
		}
	}()
}

// TestChannelBytesBounded: a channel buffers at most Options.ChannelBytes for a reader that
// never comes, and the channel of a writer that dropped is forgotten, its bytes freed, at the
// attach deadline rather than after the 5-minute idle deadline. A writer that
// drops while its frames are held back (a full buffer: its socket is not read) is caught by the
// same deadline.
func TestChannelBytesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: moves bulk frames, too slow for the race pass; the plain run covers it")
	}
	e := New(Options{ChannelBytes: 2 << 20, ChannelAttach: 300 * time.Millisecond})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
	p := channelPair(t, w, map[string]any{"buffer_size": 1024})
	raw := rawWriter(t, url, p.Writer)
	writeFrames(raw, 64, 1<<20, false)
	enginetest.Eventually(t, "2 MiB buffered", 20*time.Second, func() bool { return e.ChannelBytes() == 2<<20 })
	raw.CloseNow()
	enginetest.Eventually(t, "the channel of the dropped writer to be forgotten", 20*time.Second, func() bool { return e.ChannelBytes() == 0 && e.ChannelCount() == 0 })
	if _, err := protocol.DialReader(context.Background(), url, p.Reader); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("reader of a forgotten channel: %v", err)
	}
}

// TestChannelBudgetShared: all channels together buffer at most Options.ChannelBudget; a writer
// past it waits and goes on once a reader frees some.
func TestChannelBudgetShared(t *testing.T) {
	e := New(Options{ChannelBytes: 2 << 20, ChannelBudget: 3 << 20})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
	p1 := channelPair(t, w, nil)
	p2 := channelPair(t, w, nil)
	writeFrames(rawWriter(t, url, p1.Writer), 8, 1<<20, false)
	enginetest.Eventually(t, "channel 1 full", 20*time.Second, func() bool { return e.ChannelBytes() == 2<<20 })
	writeFrames(rawWriter(t, url, p2.Writer), 4, 1<<20, true)
	enginetest.Eventually(t, "the engine budget full", 20*time.Second, func() bool { return e.ChannelBytes() == 3<<20 })
	rd, err := protocol.DialReader(context.Background(), url, p2.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got, err := io.ReadAll(rd)
	if err != nil || len(got) != 4<<20 {
		t.Fatalf("read %d bytes: %v", len(got), err)
	}
}

// TestChannelCountLimit: the engine holds at most Options.MaxChannels channels.
func TestChannelCountLimit(t *testing.T) {
	url := enginetest.Start(t, New(Options{MaxChannels: 3, ChannelShare: 3})).URL
	w := enginetest.Worker(t, url, "default", nil)
	for range 3 {
		channelPair(t, w, nil)
	}
	_, err := w.Call(context.Background(), protocol.FnCreateChannel, nil)
	if code(err) != errcode.ChannelLimit {
		t.Fatalf("got %v, want %s", err, errcode.ChannelLimit)
	}
}

// TestChannelAttachDeadline: a channel whose ends do not both connect within
// Options.ChannelAttach is aborted and forgotten, long before the idle deadline.
func TestChannelAttachDeadline(t *testing.T) {
	e := New(Options{ChannelAttach: 100 * time.Millisecond})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
	channelPair(t, w, nil)
	waitChannels(t, e, 0)
	p := channelPair(t, w, nil)
	rd, err := protocol.DialReader(context.Background(), url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	_, err = rd.Read(make([]byte, 1))
	if d := abortDetail(t, err); !strings.Contains(d, "not connected at both ends") {
		t.Fatalf("detail %q", d)
	}
	waitChannels(t, e, 0)
}

// TestChannelsAllocateLazily: a created channel costs no buffer until frames come (review row
// #24: 27.9 KiB each before).
func TestChannelsAllocateLazily(t *testing.T) {
	e := New(Options{MaxChannels: 5000, ChannelShare: 5000})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
	h0 := heapInUse()
	const n = 5000
	for range n {
		channelPair(t, w, map[string]any{"buffer_size": 1024})
	}
	h1 := heapInUse()
	per := float64(h1-h0) / n
	t.Logf("%d channels of buffer_size 1024, never attached: channels=%d, heap %.1f -> %.1f MiB (%.2f KiB each)",
		n, e.ChannelCount(), float64(h0)/(1<<20), float64(h1)/(1<<20), per/1024)
	if per > 8<<10 {
		t.Fatalf("%.1f KiB per channel", per/1024)
	}
}

// engine::channels::remove aborts and forgets a channel at once, given the key of either end:
// one never connected is forgotten without waiting for the attach deadline, and a connected
// reader gets the abort. A wrong key is FORBIDDEN; an unknown channel is no error.
func TestChannelRemove(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
	ctx := context.Background()
	idle := channelPair(t, w, map[string]any{})
	live := channelPair(t, w, map[string]any{})
	waitChannels(t, e, 2)
	rd, err := protocol.DialReader(ctx, url, live.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := w.Call(ctx, protocol.FnRemoveChannel, map[string]string{"channel_id": idle.ChannelID, "access_key": "nope"}); protocol.AsError(err).Code != errcode.Forbidden {
		t.Errorf("wrong key: %v", err)
	}
	for _, ref := range []protocol.ChannelRef{idle.Writer, live.Writer, live.Reader} {
		if _, err := w.Call(ctx, protocol.FnRemoveChannel, map[string]string{"channel_id": ref.ChannelID, "access_key": ref.AccessKey}); err != nil {
			t.Errorf("remove %s: %v", ref.ChannelID, err)
		}
	}
	waitChannels(t, e, 0)
	if _, err := io.ReadAll(rd); !strings.Contains(abortDetail(t, err), "removed") {
		t.Errorf("reader of a removed channel: %v", err)
	}
}

// engine::channels::create_many makes count channels in one call, all or none within
// MaxChannels; engine::channels::remove_many removes several in one call, a wrong key failing
// the call (FORBIDDEN) without keeping the others.
func TestChannelsManyAtOnce(t *testing.T) {
	e := New(Options{MaxChannels: 5, ChannelShare: 5})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
	ctx := context.Background()
	for _, bad := range []map[string]any{{}, {"count": 0}, {"count": protocol.MaxChannelsPerCall + 1}, {"count": 2, "buffer_size": 0}} {
		if _, err := w.Call(ctx, protocol.FnCreateChannels, bad); protocol.AsError(err).Code != errcode.InvalidArguments {
			t.Errorf("create_many %v: %v, want %s", bad, err, errcode.InvalidArguments)
		}
	}
	pairs, err := w.CreateChannels(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range pairs {
		if seen[p.ChannelID] || p.Reader.Direction != protocol.ChannelRead || p.Writer.Direction != protocol.ChannelWrite || p.Reader.AccessKey == p.Writer.AccessKey {
			t.Errorf("pair %+v (seen %v)", p, seen[p.ChannelID])
		}
		seen[p.ChannelID] = true
	}
	if n := e.ChannelCount(); n != 4 {
		t.Fatalf("%d channels after create_many of 4", n)
	}
	// 2 more would pass the limit of 5: none is made.
	if _, err := w.CreateChannels(ctx, 2); protocol.AsError(err).Code != errcode.ChannelLimit {
		t.Errorf("create_many past the limit: %v, want %s", err, errcode.ChannelLimit)
	}
	if n := e.ChannelCount(); n != 4 {
		t.Errorf("%d channels after a refused create_many, want 4", n)
	}
	// A connected reader of a removed channel gets the abort.
	rd, err := protocol.DialReader(ctx, url, pairs[0].Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	keys := []protocol.ChannelKey{{ChannelID: pairs[0].ChannelID, AccessKey: pairs[0].Writer.AccessKey},
		{ChannelID: pairs[1].ChannelID, AccessKey: "nope"}, {ChannelID: pairs[2].ChannelID, AccessKey: pairs[2].Reader.AccessKey}}
	if _, err := w.Call(ctx, protocol.FnRemoveChannels, map[string]any{"channels": keys}); protocol.AsError(err).Code != errcode.Forbidden {
		t.Errorf("remove_many with a wrong key: %v, want %s", err, errcode.Forbidden)
	}
	waitChannels(t, e, 2) // the two with a right key are gone
	if _, err := io.ReadAll(rd); !strings.Contains(abortDetail(t, err), "removed") {
		t.Errorf("reader of a removed channel: %v", err)
	}
	if err := w.RemoveChannels(ctx, []protocol.ChannelRef{pairs[1].Writer, pairs[3].Reader, pairs[0].Reader}); err != nil {
		t.Fatal(err)
	}
	waitChannels(t, e, 0) // an already forgotten channel is no error
	if _, err := w.Call(ctx, protocol.FnRemoveChannels, map[string]any{"channels": []protocol.ChannelKey{{ChannelID: "x"}}}); protocol.AsError(err).Code != errcode.InvalidArguments {
		t.Errorf("remove_many without a key: %v", err)
	}
}

// engine::channels::await_peer answers once the end opposite the given one connects, or once a
// listed channel is gone; a wrong key is FORBIDDEN.
func TestChannelAwaitPeer(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	w := enginetest.Worker(t, url, "default", nil)
	ctx := context.Background()
	pairs, err := w.CreateChannels(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AwaitPeer(ctx, []protocol.ChannelRef{{ChannelID: pairs[0].ChannelID, AccessKey: "nope"}}); protocol.AsError(err).Code != errcode.Forbidden {
		t.Errorf("wrong key: %v", err)
	}
	type result struct {
		id       string
		attached bool
		err      error
	}
	await := func(refs ...protocol.ChannelRef) <-chan result {
		r := make(chan result, 1)
		go func() {
			id, ok, err := w.AwaitPeer(ctx, refs)
			r <- result{id, ok, err}
		}()
		return r
	}
	// The worker holds the reader of pairs[0] and the writer of pairs[1]: the other side's
	// writer of pairs[0] connecting answers.
	got := await(pairs[0].Reader, pairs[1].Writer)
	select {
	case r := <-got:
		t.Fatalf("answered before an end connected: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	wr, err := protocol.DialWriter(ctx, url, pairs[0].Writer)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	if r := <-got; r.err != nil || r.id != pairs[0].ChannelID || !r.attached {
		t.Errorf("after the peer connected: %+v", r)
	}
	// Already connected: at once.
	if id, ok, err := w.AwaitPeer(ctx, []protocol.ChannelRef{pairs[0].Reader}); err != nil || id != pairs[0].ChannelID || !ok {
		t.Errorf("peer already connected: %s %v %v", id, ok, err)
	}
	// A removed channel answers attached false.
	got = await(pairs[1].Writer)
	if err := w.RemoveChannel(ctx, pairs[1].Reader); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || r.id != pairs[1].ChannelID || r.attached {
		t.Errorf("after the channel was removed: %+v", r)
	}
	if id, ok, err := w.AwaitPeer(ctx, []protocol.ChannelRef{pairs[1].Writer}); err != nil || id != pairs[1].ChannelID || ok {
		t.Errorf("a forgotten channel: %s %v %v", id, ok, err)
	}
}

// createFails asserts that w's engine::channels::create is CHANNEL_LIMIT, with want in its message.
func createFails(t *testing.T, w *protocol.Worker, want string) {
	t.Helper()
	_, err := w.Call(context.Background(), protocol.FnCreateChannel, nil)
	if code(err) != errcode.ChannelLimit || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %s naming %q", err, errcode.ChannelLimit, want)
	}
}

// One connection holds at most a quarter of the engine's channels; the channels a trusted
// worker created stay after it leaves, for the ends it handed the keys to.
func TestChannelShareOfOneConnection(t *testing.T) {
	e := New(Options{MaxChannels: 8})
	url := enginetest.Start(t, e).URL
	greedy := enginetest.Worker(t, url, "default", nil)
	channelPair(t, greedy, nil)
	used := channelPair(t, greedy, nil)
	createFails(t, greedy, "the 2 a connection may hold")
	other := enginetest.Worker(t, url, "default", nil)
	channelPair(t, other, nil)
	rd, err := protocol.DialReader(context.Background(), url, used.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	waitChannels(t, e, 3)
	greedy.Close()
	other.Close()
	waitGone(t, e, greedy.WorkerID(), other.WorkerID())
	if n := e.ChannelCount(); n != 3 {
		t.Fatalf("%d channels once their trusted creators left, want 3", n)
	}
}

// waitGone polls until the engine has forgotten the connections of the worker ids given.
func waitGone(t *testing.T, e *Engine, ids ...string) {
	t.Helper()
	left := 0
	gone := func() bool {
		e.mu.RLock()
		defer e.mu.RUnlock()
		left = 0
		for _, id := range ids {
			if e.conns[id] != nil {
				left++
			}
		}
		return left == 0
	}
	if !enginetest.Poll(5*time.Second, gone) {
		t.Fatalf("%d of the connections are still there", left)
	}
}

// A session of a gated listener holds at most a sixteenth of the engine's channels, and all
// sessions together leave a quarter to ungated (trusted) workers, as the http worker is; the
// channels a session created that no end connected to are forgotten when it leaves.
func TestChannelShareOfGatedSessions(t *testing.T) {
	e := New(Options{MaxChannels: 16})
	open := Listener{Name: "open", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{}}
	bound := []Bound{{Listener: e.mainListener()}, {Listener: open}}
	urls := make([]string, len(bound))
	for i := range bound {
		bound[i].Net, urls[i] = enginetest.Listen(t)
	}
	enginetest.Go(t, func(ctx context.Context) error { return e.ServeAll(ctx, bound) })

	first := client(t, urls[1], "", nil)
	channelPair(t, first, nil)
	createFails(t, first, "the 1 a session of a gated listener may hold")
	for range 11 {
		channelPair(t, client(t, urls[1], "", nil), nil)
	}
	createFails(t, client(t, urls[1], "", nil), "the 12 they may hold together")
	trusted := client(t, urls[0], "", nil)
	for range 4 {
		channelPair(t, trusted, nil)
	}
	waitChannels(t, e, 16)
	first.Close() // a session's channels no end connected to go with it
	waitChannels(t, e, 15)
}
