package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// FnCreateChannel creates a stream channel.
const FnCreateChannel = "engine::channels::create"

// FnRemoveChannel aborts and forgets a stream channel, {channel_id, access_key} (of either end).
const FnRemoveChannel = "engine::channels::remove"

// FnCreateChannels creates several stream channels in one call, {count, buffer_size?} (this
// engine's own, beside iii's engine::channels::create).
const FnCreateChannels = "engine::channels::create_many"

// FnRemoveChannels removes several stream channels in one call, {channels: [ChannelKey]}.
const FnRemoveChannels = "engine::channels::remove_many"

// FnAwaitPeer answers once the end opposite a given one of some channels connects, or one of
// them is gone, {channels: [ChannelKey]} -> {channel_id, attached}.
const FnAwaitPeer = "engine::channels::await_peer"

// MaxChannelsPerCall is the most channels one create_many or remove_many call takes.
const MaxChannelsPerCall = 256

// ChannelPathPrefix is the listener path of channel streams; the channel id follows it.
const ChannelPathPrefix = "/ws/channels/"

// Channel directions of a ChannelRef.
const (
	ChannelRead  = "read"
	ChannelWrite = "write"
)

// MaxChannelFrame is the largest frame a channel writer may send; ChannelWriter splits writes
// into frames of at most ChannelChunk bytes.
const (
	MaxChannelFrame = 1 << 20
	ChannelChunk    = 256 << 10
)

// ChannelAbortStatus is the WebSocket close status code of an aborted channel; the close reason
// says why. An untyped constant, so it compares with and converts to any WebSocket library's
// status type.
const ChannelAbortStatus = 4000

// ChannelRef is a StreamChannelRef: one end of a channel and the key that opens it.
type ChannelRef struct {
	ChannelID string `json:"channel_id"`
	AccessKey string `json:"access_key"`
	Direction string `json:"direction"`
}

// ChannelPair is the reply of engine::channels::create.
type ChannelPair struct {
	ChannelID string     `json:"channel_id"`
	Reader    ChannelRef `json:"reader"`
	Writer    ChannelRef `json:"writer"`
}

// ChannelPairs is the reply of engine::channels::create_many.
type ChannelPairs struct {
	Channels []ChannelPair `json:"channels"`
}

// ChannelKey names a channel to remove and proves its caller holds it (the key of either end).
type ChannelKey struct {
	ChannelID string `json:"channel_id"`
	AccessKey string `json:"access_key"`
}

// ChannelAbortedError is the error a ChannelReader or ChannelWriter returns when the channel was
// aborted; Detail is the engine's reason.
type ChannelAbortedError struct{ Detail string }

func (e *ChannelAbortedError) Error() string { return "channel aborted: " + e.Detail }

// ChannelURL is the WebSocket URL of ref on the engine at engineURL (ws, wss, http or https).
func ChannelURL(engineURL string, ref ChannelRef) (string, error) {
	if ref.ChannelID == "" || ref.AccessKey == "" {
		return "", errors.New("channel ref needs channel_id and access_key")
	}
	u, err := url.Parse(engineURL)
	if err != nil {
		return "", fmt.Errorf("engine URL %q: %w", engineURL, err)
	}
	switch u.Scheme {
	case "ws", "http":
		u.Scheme = "ws"
	case "wss", "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("engine URL %q: scheme must be ws, wss, http or https", engineURL)
	}
	u.Path = ChannelPathPrefix + url.PathEscape(ref.ChannelID)
	u.RawPath = ""
	u.RawQuery = url.Values{"key": {ref.AccessKey}}.Encode()
	u.Fragment = ""
	return u.String(), nil
}

// CreateChannel asks the engine for a new channel and returns its two ends.
func (w *Worker) CreateChannel(ctx context.Context) (reader, writer ChannelRef, err error) {
	raw, err := w.Call(ctx, FnCreateChannel, map[string]any{})
	if err != nil {
		return reader, writer, err
	}
	var p ChannelPair
	if err := json.Unmarshal(raw, &p); err != nil {
		return reader, writer, fmt.Errorf("%s reply: %w", FnCreateChannel, err)
	}
	return p.Reader, p.Writer, nil
}

// RemoveChannel aborts and forgets the channel of ref on the engine (either end's ref), without
// waiting for the engine's answer.
func (w *Worker) RemoveChannel(ctx context.Context, ref ChannelRef) error {
	return w.CallVoid(ctx, FnRemoveChannel, map[string]string{"channel_id": ref.ChannelID, "access_key": ref.AccessKey})
}

// CreateChannels asks the engine for n new channels in one call (engine::channels::create_many).
func (w *Worker) CreateChannels(ctx context.Context, n int) ([]ChannelPair, error) {
	raw, err := w.Call(ctx, FnCreateChannels, map[string]int{"count": n})
	if err != nil {
		return nil, err
	}
	var p ChannelPairs
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("%s reply: %w", FnCreateChannels, err)
	}
	if len(p.Channels) != n {
		return nil, fmt.Errorf("%s reply: %d channels, asked for %d", FnCreateChannels, len(p.Channels), n)
	}
	return p.Channels, nil
}

// RemoveChannels removes the channels of refs on the engine in one call
// (engine::channels::remove_many), without waiting for the engine's answer.
func (w *Worker) RemoveChannels(ctx context.Context, refs []ChannelRef) error {
	keys := make([]ChannelKey, len(refs))
	for i, r := range refs {
		keys[i] = ChannelKey{ChannelID: r.ChannelID, AccessKey: r.AccessKey}
	}
	return w.CallVoid(ctx, FnRemoveChannels, map[string]any{"channels": keys})
}

// AwaitPeer waits until, of one of the channels of refs, the end opposite ref connects
// (attached) or the channel is gone (engine::channels::await_peer); it returns that channel's id.
func (w *Worker) AwaitPeer(ctx context.Context, refs []ChannelRef, opts ...CallOption) (channelID string, attached bool, err error) {
	keys := make([]ChannelKey, len(refs))
	for i, r := range refs {
		keys[i] = ChannelKey{ChannelID: r.ChannelID, AccessKey: r.AccessKey}
	}
	raw, err := w.Call(ctx, FnAwaitPeer, map[string]any{"channels": keys}, opts...)
	if err != nil {
		return "", false, err
	}
	var a struct {
		ChannelID string `json:"channel_id"`
		Attached  bool   `json:"attached"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", false, fmt.Errorf("%s reply: %w", FnAwaitPeer, err)
	}
	return a.ChannelID, a.Attached, nil
}

// OpenReader connects to the read end ref on the worker's engine; see DialReader.
func (w *Worker) OpenReader(ctx context.Context, ref ChannelRef) (io.ReadCloser, error) {
	return DialReader(ctx, w.cfg.URL, ref)
}

// OpenWriter connects to the write end ref on the worker's engine; see DialWriter.
func (w *Worker) OpenWriter(ctx context.Context, ref ChannelRef) (io.WriteCloser, error) {
	return DialWriter(ctx, w.cfg.URL, ref)
}

func dialChannel(ctx context.Context, engineURL string, ref ChannelRef, direction string) (*websocket.Conn, error) {
	if ref.Direction != direction {
		return nil, fmt.Errorf("channel ref has direction %q, want %q", ref.Direction, direction)
	}
	u, err := ChannelURL(engineURL, ref)
	if err != nil {
		return nil, err
	}
	c, resp, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("opening channel %s: engine answered %s", ref.ChannelID, resp.Status)
		}
		return nil, fmt.Errorf("opening channel %s: %w", ref.ChannelID, err)
	}
	return c, nil
}

// ChannelReader is the read end of a channel. Read returns the bytes the writer sent, then
// io.EOF when it closed normally, or a *ChannelAbortedError when the channel was aborted.
//
// A channel carries binary frames (the byte stream) and text frames (messages: a writer's
// SendMessage, iii's sendMessage). With an OnMessage callback, as in iii's SDKs, Read returns
// only the binary frames and each text frame goes to the callbacks, in order, from Read; without
// one, Read returns the text frames' bytes in the stream too, so nothing sent is lost.
type ChannelReader struct {
	c    *websocket.Conn
	ctx  context.Context
	stop func() bool
	cur  io.Reader
	err  error

	mu    sync.Mutex
	onMsg []func(msg string)
}

// OnMessage registers a callback for the channel's text messages; register it before reading.
func (r *ChannelReader) OnMessage(f func(msg string)) {
	r.mu.Lock()
	r.onMsg = append(r.onMsg, f)
	r.mu.Unlock()
}

// message passes a text frame to the OnMessage callbacks; it reports false when there are none.
func (r *ChannelReader) message(fr io.Reader) (bool, error) {
	r.mu.Lock()
	cbs := r.onMsg
	r.mu.Unlock()
	if len(cbs) == 0 {
		return false, nil
	}
	b, err := io.ReadAll(fr)
	if err != nil {
		return true, err
	}
	for _, f := range cbs {
		f(string(b))
	}
	return true, nil
}

// DialReader connects to the read end ref on the engine at engineURL. ctx bounds the whole
// stream: when it ends, the reader closes and the channel aborts.
func DialReader(ctx context.Context, engineURL string, ref ChannelRef) (*ChannelReader, error) {
	c, err := dialChannel(ctx, engineURL, ref, ChannelRead)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(MaxChannelFrame)
	r := &ChannelReader{c: c, ctx: ctx}
	r.stop = context.AfterFunc(ctx, func() { c.CloseNow() })
	return r, nil
}

// Read reads the stream.
func (r *ChannelReader) Read(p []byte) (int, error) {
	for {
		if r.err != nil {
			return 0, r.err
		}
		if r.cur != nil {
			n, err := r.cur.Read(p)
			if err == io.EOF {
				r.cur = nil
				if n == 0 {
					continue
				}
				err = nil
			}
			if err != nil {
				r.err = r.fail(err)
			}
			return n, r.err
		}
		typ, cur, err := r.c.Reader(context.Background())
		if err == nil && typ == websocket.MessageText {
			var taken bool
			if taken, err = r.message(cur); taken && err == nil {
				continue
			}
		}
		if err != nil {
			r.err = r.fail(err)
			continue
		}
		r.cur = cur
	}
}

func (r *ChannelReader) fail(err error) error {
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure:
		return io.EOF
	case ChannelAbortStatus:
		var ce websocket.CloseError
		errors.As(err, &ce)
		return &ChannelAbortedError{Detail: ce.Reason}
	}
	return &ChannelAbortedError{Detail: "connection lost: " + err.Error()}
}

// Close closes the reader; before the end of the stream it aborts the channel.
func (r *ChannelReader) Close() error {
	r.stop()
	if r.err == io.EOF {
		return r.c.CloseNow()
	}
	return r.c.Close(websocket.StatusNormalClosure, "reader done")
}

// ChannelWriter is the write end of a channel. Close ends the stream normally; Abort ends it
// with a reason the reader sees.
type ChannelWriter struct {
	c    *websocket.Conn
	ctx  context.Context
	gone context.Context // cancelled when the engine closes this end
	stop func() bool

	mu     sync.Mutex
	closed bool
}

// DialWriter connects to the write end ref on the engine at engineURL. ctx bounds the whole
// stream: when it ends before Close, the writer aborts the channel.
func DialWriter(ctx context.Context, engineURL string, ref ChannelRef) (*ChannelWriter, error) {
	c, err := dialChannel(ctx, engineURL, ref, ChannelWrite)
	if err != nil {
		return nil, err
	}
	w := &ChannelWriter{c: c, ctx: ctx, gone: c.CloseRead(context.Background())}
	w.stop = context.AfterFunc(ctx, func() { w.Abort("writer's context ended: " + context.Cause(ctx).Error()) })
	return w, nil
}

// Write sends p in frames of at most ChannelChunk bytes.
func (w *ChannelWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), ChannelChunk)
		if err := w.c.Write(w.gone, websocket.MessageBinary, p[:k]); err != nil {
			if w.ctx.Err() != nil {
				return n, w.ctx.Err()
			}
			return n, &ChannelAbortedError{Detail: "the engine closed the channel: " + err.Error()}
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// SendMessage sends msg as one text frame: a message beside the byte stream, which iii's SDKs
// hand to the reader's onMessage callbacks (ChannelReader.OnMessage here).
func (w *ChannelWriter) SendMessage(msg string) error {
	if len(msg) > MaxChannelFrame {
		return fmt.Errorf("channel message of %d bytes: a frame holds at most %d", len(msg), MaxChannelFrame)
	}
	if err := w.c.Write(w.gone, websocket.MessageText, []byte(msg)); err != nil {
		if w.ctx.Err() != nil {
			return w.ctx.Err()
		}
		return &ChannelAbortedError{Detail: "the engine closed the channel: " + err.Error()}
	}
	return nil
}

// Done is closed once the engine closed this end: the channel was aborted (its reader left, or
// it expired unread) or the writer ended it. A writer with nothing to send learns from it that
// no one reads any more.
func (w *ChannelWriter) Done() <-chan struct{} { return w.gone.Done() }

// Close ends the stream normally: the reader gets io.EOF after the bytes written.
func (w *ChannelWriter) Close() error {
	w.stop()
	return w.end(websocket.StatusNormalClosure, "")
}

// Abort ends the stream with reason: the reader gets a *ChannelAbortedError.
func (w *ChannelWriter) Abort(reason string) error {
	if len(reason) > 120 {
		reason = reason[:120]
	}
	return w.end(ChannelAbortStatus, strings.ToValidUTF8(reason, ""))
}

func (w *ChannelWriter) end(code websocket.StatusCode, reason string) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	return w.c.Close(code, reason)
}
