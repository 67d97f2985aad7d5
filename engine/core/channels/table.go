// Package channels is the engine's table of stream channels: each a buffered pipe between one
// writer and one reader WebSocket, made by engine::channels::create, reached at
// /ws/channels/{id}?key=, and forgotten when both ends are done, removed, idle or never
// connected. It holds their frames within the engine's byte budget and limits how many each
// creator holds. The engine (package core) registers its built-ins and hands it the requests
// for /ws/channels/; what it needs of the engine is given per request (Connect): how to accept
// the WebSocket, which end a request may connect, and where a channel it does not hold is.
package channels

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Channel buffer limits, in frames.
const (
	DefaultBuffer = 16
	MaxBuffer     = 1024
)

// DefaultChannelIdle is how long a channel may sit without traffic or a new end before it is
// aborted and forgotten, unless both its ends are connected: a terminal or a quiet server's
// output may say nothing for longer, and its two live connections (TCP keep-alive finds a dead
// peer) are what holds it.
const DefaultIdle = 5 * time.Minute

const (
	endReader = 0
	endWriter = 1
)

type channel struct {
	id        string
	owner     string // the worker id of the connection that created it; "" for the engine's own
	gated     bool   // created by a session of a gated listener
	keys      [2]string
	maxFrames int
	created   time.Time
	ctx       context.Context
	cancel    context.CancelFunc
	cs        *Table
	wake      chan struct{}    // capacity 1: a frame or the end was queued (the reader waits on it)
	space     chan struct{}    // capacity 1: a frame was taken (the writer waits on it)
	joined    [2]chan struct{} // closed once the reader, the writer, connects

	mu       sync.Mutex
	buf      []frame // frames waiting for the reader; grows as frames come (nothing up front)
	bytes    int     // bytes in buf, also held in the engine's channel budget
	eof      bool    // the writer closed normally
	attached [2]bool
	done     [2]bool
	detail   string // why the channel was aborted; "" while it was not
	last     time.Time
}

// frame is one message through a channel: its bytes and its opcode, kept end to end (iii's SDKs
// take text frames as messages and binary frames as the byte stream).
type frame struct {
	typ websocket.MessageType
	b   []byte
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (ch *channel) touch() {
	ch.mu.Lock()
	ch.last = time.Now()
	ch.mu.Unlock()
}

// abort ends the channel for both ends with detail, unless it was already aborted. The frames
// buffered so far stay for a reader that connects later (it gets them, then the abort) until the
// channel is forgotten.
func (ch *channel) abort(detail string) {
	ch.mu.Lock()
	if ch.detail == "" {
		ch.detail = detail
	}
	ch.mu.Unlock()
	ch.cancel()
}

func (ch *channel) abortDetail() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.detail
}

// Table is the engine's registry of live channels. Besides the engine-wide max, it counts
// the channels each connection created: one of an ungated listener holds at most share, a
// session of a gated listener at most gatedShare, and all sessions together at most
// gatedMax, so that the rest (at least one share) stays for trusted workers.
type Table struct {
	idle       time.Duration
	attach     time.Duration
	perChan    int
	max        int
	share      int
	gatedShare int
	gatedMax   int
	byOwner    map[string]int // channels held, by the worker id that created them (guarded by mu)
	gatedHeld  int            // channels held that sessions of gated listeners created (mu)
	wg         sync.WaitGroup // requests to connect an end, from before their upgrade (enter)
	mu         sync.Mutex
	closing    bool // CloseAll has begun: no request enters
	byID       map[string]*channel
	budgetMu   sync.Mutex
	used       int           // bytes buffered in all channels
	limit      int           // Limits.Budget
	freed      chan struct{} // closed (and replaced) whenever bytes are given back
}

// Limits bound a Table (the engine's Options.Channel* and MaxChannels).
type Limits struct {
	Idle   time.Duration // a channel not connected at both ends is forgotten after this long without traffic
	Attach time.Duration // a channel an end of which has not connected by then is forgotten
	Bytes  int           // bytes buffered in one channel
	Budget int           // bytes buffered in all channels together
	Max    int           // channels held at once
	// Share is how many channels one connection of an ungated listener may hold (at most
	// Max), GatedShare one session of a gated listener (at least 1, at most Share); all
	// sessions together hold at most Max less one Share, which stays for trusted workers.
	Share, GatedShare int
}

// New is an empty table bounded by l.
func New(l Limits) *Table {
	share := min(l.Share, l.Max)
	gatedShare := min(share, max(1, l.GatedShare))
	return &Table{idle: l.Idle, attach: l.Attach, perChan: l.Bytes, max: l.Max,
		share: share, gatedShare: gatedShare, gatedMax: max(gatedShare, l.Max-share), byOwner: map[string]int{},
		limit: l.Budget, byID: map[string]*channel{}, freed: make(chan struct{})}
}

// take reserves n buffered bytes from the engine-wide budget; when it cannot, it returns a
// channel closed at the next give.
func (cs *Table) take(n int) (bool, <-chan struct{}) {
	cs.budgetMu.Lock()
	defer cs.budgetMu.Unlock()
	if cs.used+n <= cs.limit {
		cs.used += n
		return true, nil
	}
	return false, cs.freed
}

func (cs *Table) give(n int) {
	if n == 0 {
		return
	}
	cs.budgetMu.Lock()
	cs.used -= n
	close(cs.freed)
	cs.freed = make(chan struct{})
	cs.budgetMu.Unlock()
}

// Bytes reports the bytes all channels hold for their readers.
func (cs *Table) Bytes() int {
	cs.budgetMu.Lock()
	defer cs.budgetMu.Unlock()
	return cs.used
}

// push queues frame b for the reader, waiting while the channel holds buffer_size frames or
// Limits.Bytes, or the table's Limits.Budget (back-pressure: the writer's socket
// is not read meanwhile). It reports false when the channel ended first.
func (cs *Table) push(ch *channel, f frame) bool {
	b := f.b
	for {
		ch.mu.Lock()
		room := len(ch.buf) == 0 || len(ch.buf) < ch.maxFrames && ch.bytes+len(b) <= cs.perChan
		ch.mu.Unlock()
		wait := (<-chan struct{})(ch.space)
		if room {
			ok, freed := cs.take(len(b))
			if ok {
				ch.mu.Lock()
				if ch.ctx.Err() != nil {
					ch.mu.Unlock()
					cs.give(len(b))
					return false
				}
				ch.buf = append(ch.buf, f)
				ch.bytes += len(b)
				ch.mu.Unlock()
				signal(ch.wake)
				return true
			}
			wait = freed
		}
		select {
		case <-wait:
		case <-ch.ctx.Done():
			return false
		}
	}
}

// pop takes the next frame for the reader; ok is false when none waits (eof: none ever will).
func (cs *Table) pop(ch *channel) (f frame, eof, ok bool) {
	ch.mu.Lock()
	if len(ch.buf) == 0 {
		eof = ch.eof
		ch.mu.Unlock()
		return frame{}, eof, false
	}
	f = ch.buf[0]
	ch.buf[0] = frame{}
	ch.buf = ch.buf[1:]
	if len(ch.buf) == 0 {
		ch.buf = nil
	}
	ch.bytes -= len(f.b)
	ch.mu.Unlock()
	cs.give(len(f.b))
	signal(ch.space)
	return f, false, true
}

// free drops every frame ch buffers and gives their bytes back.
func (cs *Table) free(ch *channel) {
	ch.mu.Lock()
	n := ch.bytes
	ch.buf, ch.bytes = nil, 0
	ch.mu.Unlock()
	cs.give(n)
}

func newKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Creator is who asks for channels: the connection's worker id ("" for the engine's own calls,
// which no share bounds) and whether it is a session of a gated listener.
type Creator struct {
	ID    string
	Gated bool
}

// createN makes n channels for by, all or none: none when the engine, by, or the sessions of
// gated listeners together would then hold more than their limit.
func (cs *Table) createN(n, buffer int, by Creator) ([]*channel, error) {
	now := time.Now()
	chs := make([]*channel, n)
	for i := range chs {
		ctx, cancel := context.WithCancel(context.Background())
		chs[i] = &channel{id: uuid.NewString(), owner: by.ID, gated: by.Gated, keys: [2]string{newKey(), newKey()}, maxFrames: buffer, created: now, cs: cs,
			ctx: ctx, cancel: cancel, last: now, wake: make(chan struct{}, 1), space: make(chan struct{}, 1),
			joined: [2]chan struct{}{make(chan struct{}), make(chan struct{})}}
	}
	cs.mu.Lock()
	if len(cs.byID)+n > cs.max {
		held := len(cs.byID)
		cs.mu.Unlock()
		for _, ch := range chs {
			ch.cancel()
		}
		if n == 1 {
			return nil, protocol.NewError(errcode.ChannelLimit, "the engine already holds %d stream channels, its limit; close or finish some first", cs.max)
		}
		return nil, protocol.NewError(errcode.ChannelLimit, "the engine holds %d stream channels: %d more would pass its limit of %d; close or finish some first", held, n, cs.max)
	}
	if perr := cs.shareDenial(n, by); perr != nil {
		cs.mu.Unlock()
		for _, ch := range chs {
			ch.cancel()
		}
		return nil, perr
	}
	for _, ch := range chs {
		cs.byID[ch.id] = ch
	}
	if by.ID != "" {
		cs.byOwner[by.ID] += n
	}
	if by.Gated {
		cs.gatedHeld += n
	}
	cs.mu.Unlock()
	return chs, nil
}

// shareDenial is why by may not hold n more channels, nil when it may; cs.mu is held.
func (cs *Table) shareDenial(n int, by Creator) *protocol.Error {
	if by.ID == "" {
		return nil
	}
	share, kind := cs.share, "a connection"
	if by.Gated {
		share, kind = cs.gatedShare, "a session of a gated listener"
	}
	if held := cs.byOwner[by.ID]; held+n > share {
		return protocol.NewError(errcode.ChannelLimit, "worker %s holds %d stream channels: %d more would pass the %d %s may hold; close or finish some first",
			by.ID, held, n, share, kind)
	}
	if by.Gated && cs.gatedHeld+n > cs.gatedMax {
		return protocol.NewError(errcode.ChannelLimit, "sessions of gated listeners hold %d stream channels: %d more would pass the %d they may hold together (the rest is kept for trusted workers)",
			cs.gatedHeld, n, cs.gatedMax)
	}
	return nil
}

// bothConnected reports whether the reader and the writer are connected and neither is done;
// ch.mu is held.
func (ch *channel) bothConnected() bool {
	return ch.attached[endReader] && ch.attached[endWriter] && !ch.done[endReader] && !ch.done[endWriter]
}

// finish marks one end of ch done and forgets ch once both are.
func (cs *Table) finish(ch *channel, end int) {
	ch.mu.Lock()
	ch.done[end] = true
	both := ch.done[endReader] && ch.done[endWriter]
	ch.mu.Unlock()
	if both {
		cs.forget(ch)
	}
}

func (cs *Table) forget(ch *channel) {
	cs.mu.Lock()
	if cs.byID[ch.id] == ch {
		delete(cs.byID, ch.id)
		if ch.owner != "" {
			if cs.byOwner[ch.owner]--; cs.byOwner[ch.owner] <= 0 {
				delete(cs.byOwner, ch.owner)
			}
		}
		if ch.gated {
			cs.gatedHeld--
		}
	}
	cs.mu.Unlock()
	ch.cancel()
	ch.mu.Lock()
	reading := ch.attached[endReader] && !ch.done[endReader]
	ch.mu.Unlock()
	if !reading {
		cs.free(ch)
	}
}

// Expire aborts and forgets every channel idle since before now-idle that is not connected at
// both ends, and every channel an end of which has not connected within the attach deadline of
// its creation.
func (cs *Table) Expire(now time.Time) {
	cs.mu.Lock()
	type old struct {
		ch     *channel
		detail string
	}
	var expired []old
	for _, ch := range cs.byID {
		ch.mu.Lock()
		switch {
		case now.Sub(ch.last) > cs.idle && !ch.bothConnected():
			expired = append(expired, old{ch, fmt.Sprintf("channel idle for more than %s", cs.idle)})
		case (!ch.attached[endReader] || !ch.attached[endWriter]) && now.Sub(ch.created) > cs.attach:
			expired = append(expired, old{ch, fmt.Sprintf("channel not connected at both ends within %s", cs.attach)})
		}
		ch.mu.Unlock()
	}
	cs.mu.Unlock()
	for _, o := range expired {
		o.ch.abort(o.detail)
		cs.forget(o.ch)
	}
}

// CreatorLeft forgets the channels a session of a gated listener, of worker id, created and
// that no end has connected to yet, when it leaves: they would otherwise count against the
// sessions' share of the table until the attach deadline, so that a session reconnecting in a
// loop held it. A trusted (ungated) worker's channels stay until that deadline: creating a
// channel, leaving, then connecting its ends with the keys is how `iii call` and the test
// tools use them.
func (cs *Table) CreatorLeft(id string) {
	cs.mu.Lock()
	var left []*channel
	if cs.byOwner[id] > 0 {
		for _, ch := range cs.byID {
			if ch.owner != id || !ch.gated {
				continue
			}
			ch.mu.Lock()
			if !ch.attached[endReader] && !ch.attached[endWriter] {
				left = append(left, ch)
			}
			ch.mu.Unlock()
		}
	}
	cs.mu.Unlock()
	for _, ch := range left {
		ch.abort("the worker that created the channel left before either end connected")
		cs.forget(ch)
	}
}

// enter looks up a channel for a request to connect one of its ends (nil when there is none),
// and counts the request among those CloseAll waits for: from before its upgrade, so that the
// server is not closed under a connection being handed over (ok is false once CloseAll has
// begun). Every entered request calls cs.wg.Done when it ends.
func (cs *Table) enter(id string) (ch *channel, ok bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closing {
		return nil, false
	}
	cs.wg.Add(1)
	return cs.byID[id], true
}

// CloseAll aborts every channel and waits up to max for their connections to end.
func (cs *Table) CloseAll(max time.Duration) {
	cs.mu.Lock()
	cs.closing = true
	all := make([]*channel, 0, len(cs.byID))
	for _, ch := range cs.byID {
		all = append(all, ch)
	}
	cs.mu.Unlock()
	for _, ch := range all {
		ch.abort("engine shutting down")
		cs.forget(ch)
	}
	done := make(chan struct{})
	go func() { cs.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(max):
	}
}

// Live is the number of channels in the table.
func (cs *Table) Live() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.byID)
}

// Has reports whether the table holds channel id (another engine of a cluster asks, to proxy
// an end connecting there).
func (cs *Table) Has(id string) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.byID[id] != nil
}

// Create is engine::channels::create {buffer_size?} -> {channel_id, reader, writer}: one
// channel for by.
func (cs *Table) Create(_ context.Context, by Creator, payload json.RawMessage) (any, error) {
	var in struct {
		BufferSize *int `json:"buffer_size"`
	}
	if len(payload) > 0 && string(payload) != "null" {
		if err := json.Unmarshal(payload, &in); err != nil {
			return nil, protocol.NewError(errcode.InvalidArguments, "engine::channels::create takes {buffer_size?}: %v", err)
		}
	}
	buffer, err := channelBuffer(in.BufferSize)
	if err != nil {
		return nil, err
	}
	chs, err := cs.createN(1, buffer, by)
	if err != nil {
		return nil, err
	}
	return chs[0].pair(), nil
}

func channelBuffer(size *int) (int, error) {
	if size == nil {
		return DefaultBuffer, nil
	}
	if *size < 1 || *size > MaxBuffer {
		return 0, protocol.NewError(errcode.InvalidArguments, "buffer_size must be between 1 and %d frames", MaxBuffer)
	}
	return *size, nil
}

func (ch *channel) pair() protocol.ChannelPair {
	return protocol.ChannelPair{
		ChannelID: ch.id,
		Reader:    protocol.ChannelRef{ChannelID: ch.id, AccessKey: ch.keys[endReader], Direction: protocol.ChannelRead},
		Writer:    protocol.ChannelRef{ChannelID: ch.id, AccessKey: ch.keys[endWriter], Direction: protocol.ChannelWrite},
	}
}

// CreateMany is engine::channels::create_many {count, buffer_size?}: count channels in one
// call, all or none (CHANNEL_LIMIT when they would pass the engine's limit), so that a worker
// keeping a few ahead of its requests pays one call for many.
func (cs *Table) CreateMany(_ context.Context, by Creator, payload json.RawMessage) (any, error) {
	var in struct {
		Count      int  `json:"count"`
		BufferSize *int `json:"buffer_size"`
	}
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {count, buffer_size?}: %v", protocol.FnCreateChannels, err)
	}
	if in.Count < 1 || in.Count > protocol.MaxChannelsPerCall {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s: count must be between 1 and %d", protocol.FnCreateChannels, protocol.MaxChannelsPerCall)
	}
	buffer, err := channelBuffer(in.BufferSize)
	if err != nil {
		return nil, err
	}
	chs, err := cs.createN(in.Count, buffer, by)
	if err != nil {
		return nil, err
	}
	out := protocol.ChannelPairs{Channels: make([]protocol.ChannelPair, len(chs))}
	for i, ch := range chs {
		out.Channels[i] = ch.pair()
	}
	return out, nil
}

// Remove is engine::channels::remove: it aborts and forgets the channel {channel_id, access_key} (the key of either end
// proves the caller holds it), as iii's http worker removes a request's two channels once its
// response is done: a connected end gets the abort, an end that never connected is never
// waited for. A channel already forgotten is no error.
func (cs *Table) Remove(_ context.Context, _ Creator, payload json.RawMessage) (any, error) {
	var in protocol.ChannelKey
	if err := json.Unmarshal(payload, &in); err != nil || in.ChannelID == "" || in.AccessKey == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {channel_id, access_key}", protocol.FnRemoveChannel)
	}
	return nil, cs.removeKey(in)
}

// removeKey aborts and forgets the channel of k, if the table still holds it.
func (cs *Table) removeKey(k protocol.ChannelKey) error {
	cs.mu.Lock()
	ch := cs.byID[k.ChannelID]
	cs.mu.Unlock()
	if ch == nil {
		return nil
	}
	key := []byte(k.AccessKey)
	if subtle.ConstantTimeCompare([]byte(ch.keys[endReader]), key) != 1 && subtle.ConstantTimeCompare([]byte(ch.keys[endWriter]), key) != 1 {
		return protocol.NewError(errcode.Forbidden, "wrong access key for channel %s", k.ChannelID)
	}
	ch.abort("channel removed by its owner")
	cs.forget(ch)
	return nil
}

// RemoveMany is engine::channels::remove_many {channels: [{channel_id, access_key}]}: each
// as engine::channels::remove, in one call. Every channel whose key is right is removed; a
// wrong key fails the call (FORBIDDEN, naming the first such channel) after the others are.
func (cs *Table) RemoveMany(_ context.Context, _ Creator, payload json.RawMessage) (any, error) {
	var in struct {
		Channels []protocol.ChannelKey `json:"channels"`
	}
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {channels: [{channel_id, access_key}]}: %v", protocol.FnRemoveChannels, err)
	}
	if len(in.Channels) > protocol.MaxChannelsPerCall {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s: at most %d channels a call", protocol.FnRemoveChannels, protocol.MaxChannelsPerCall)
	}
	for _, k := range in.Channels {
		if k.ChannelID == "" || k.AccessKey == "" {
			return nil, protocol.NewError(errcode.InvalidArguments, "%s: every channel needs channel_id and access_key", protocol.FnRemoveChannels)
		}
	}
	var first error
	for _, k := range in.Channels {
		if err := cs.removeKey(k); err != nil && first == nil {
			first = err
		}
	}
	return nil, first
}

// AwaitPeer is engine::channels::await_peer {channels: [{channel_id, access_key}]}: it answers
// {channel_id, attached: true} once, of any listed channel, the end opposite the key's has
// connected, and {channel_id, attached: false} once one is gone (removed, aborted, expired).
// The http worker connects its own ends of a request's channels only once the handler
// connects the other, so a request whose handler ignores them costs no connection.
func (cs *Table) AwaitPeer(ctx context.Context, _ Creator, payload json.RawMessage) (any, error) {
	var in struct {
		Channels []protocol.ChannelKey `json:"channels"`
	}
	if err := json.Unmarshal(payload, &in); err != nil || len(in.Channels) == 0 || len(in.Channels) > protocol.MaxChannelsPerCall {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {channels: [{channel_id, access_key}]}, 1 to %d of them", protocol.FnAwaitPeer, protocol.MaxChannelsPerCall)
	}
	type answer struct {
		ChannelID string `json:"channel_id"`
		Attached  bool   `json:"attached"`
	}
	cases := make([]reflect.SelectCase, 0, 2*len(in.Channels)+1)
	ids := make([]string, 0, len(in.Channels))
	for _, k := range in.Channels {
		cs.mu.Lock()
		ch := cs.byID[k.ChannelID]
		cs.mu.Unlock()
		if ch == nil {
			return answer{ChannelID: k.ChannelID}, nil
		}
		end := -1
		for i, key := range ch.keys {
			if subtle.ConstantTimeCompare([]byte(key), []byte(k.AccessKey)) == 1 {
				end = i
			}
		}
		if end < 0 {
			return nil, protocol.NewError(errcode.Forbidden, "wrong access key for channel %s", k.ChannelID)
		}
		ids = append(ids, ch.id)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch.joined[1-end])},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch.ctx.Done())})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	i, _, _ := reflect.Select(cases)
	if i == len(cases)-1 {
		return nil, ctx.Err()
	}
	return answer{ChannelID: ids[i/2], Attached: i%2 == 0}, nil
}

// Connect is what serving a request to connect one end of a channel needs of the engine.
type Connect struct {
	// Accept are the options of the WebSocket upgrade: the listener's allowed origins.
	Accept *websocket.AcceptOptions
	// End is the end the request may connect, given the keys of the channel's two ends: the
	// index of the key it proves (0 the reader's, 1 the writer's), -1 for none.
	End func(keys [2]string) int
	// Elsewhere serves a request for a channel the table does not hold (another engine's, in a
	// cluster); false when none holds it. nil: no other engine.
	Elsewhere func() bool
}

// Serve upgrades a request for /ws/channels/{id} to one end of that channel: HTTP 503 once the
// table is closing, 404 for no such channel, 403 for a wrong key, 409 for an end already
// connected.
func (cs *Table) Serve(w http.ResponseWriter, r *http.Request, id string, c Connect) {
	ch, ok := cs.enter(id)
	if !ok {
		http.Error(w, "the engine is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer cs.wg.Done()
	if ch == nil {
		if c.Elsewhere == nil || !c.Elsewhere() {
			http.Error(w, "no such channel", http.StatusNotFound)
		}
		return
	}
	end := c.End(ch.keys)
	if end < 0 {
		http.Error(w, "wrong channel access key", http.StatusForbidden)
		return
	}
	ch.mu.Lock()
	taken := ch.attached[end]
	ch.attached[end] = true
	ch.last = time.Now()
	if !taken {
		close(ch.joined[end])
	}
	ch.mu.Unlock()
	if taken {
		http.Error(w, "this end of the channel is already connected", http.StatusConflict)
		return
	}
	ws, err := websocket.Accept(w, r, c.Accept)
	if err != nil {
		ch.abort("the " + endName(end) + " failed to connect")
		cs.finish(ch, end)
		return
	}
	if end == endWriter {
		cs.serveWriter(ch, ws)
	} else {
		cs.serveReader(ch, ws)
	}
	cs.finish(ch, end)
}

func endName(end int) string {
	if end == endWriter {
		return "writer"
	}
	return "reader"
}

func (cs *Table) serveWriter(ch *channel, ws *websocket.Conn) {
	ws.SetReadLimit(protocol.MaxChannelFrame)
	closed := make(chan struct{})
	stop := context.AfterFunc(ch.ctx, func() {
		ws.Close(protocol.ChannelAbortStatus, batchconn.CloseReason(ch.abortDetail()))
		close(closed)
	})
	defer func() {
		if !stop() {
			<-closed // the abort's close handshake runs; let it finish
		}
		ws.CloseNow()
	}()
	for {
		typ, b, err := ws.Read(context.Background())
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure && ch.ctx.Err() == nil {
				ch.mu.Lock()
				ch.eof = true
				ch.mu.Unlock()
				signal(ch.wake)
				return
			}
			var ce websocket.CloseError
			if errors.As(err, &ce) && ce.Code == protocol.ChannelAbortStatus {
				ch.abort("writer aborted: " + ce.Reason)
				return
			}
			ch.abort("writer closed the channel abnormally: " + describeClose(err))
			return
		}
		ch.touch()
		if !cs.push(ch, frame{typ, b}) {
			return
		}
	}
}

func (cs *Table) serveReader(ch *channel, ws *websocket.Conn) {
	defer ws.CloseNow()
	gone := ws.CloseRead(context.Background())
	for {
		f, eof, ok := cs.pop(ch)
		if ok {
			ch.touch()
			if err := writeFrame(ws, f, cs.idle); err != nil {
				ch.abort("reader connection failed: " + err.Error())
				return
			}
			continue
		}
		if eof {
			ws.Close(websocket.StatusNormalClosure, "")
			return
		}
		select {
		case <-ch.wake:
		case <-ch.ctx.Done():
			deliverBuffered(ch, ws)
			ws.Close(protocol.ChannelAbortStatus, batchconn.CloseReason(ch.abortDetail()))
			return
		case <-gone.Done():
			ch.abort("reader left before the end of the stream")
			return
		}
	}
}

// writeFrame passes one frame to the reader with the opcode the writer sent it with; a reader
// that takes none for the idle deadline has stalled.
func writeFrame(ws *websocket.Conn, f frame, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return ws.Write(ctx, f.typ, f.b)
}

// abortDrainTimeout bounds how long an aborted channel keeps delivering its buffered frames.
const abortDrainTimeout = 5 * time.Second

// deliverBuffered passes the frames the writer sent before an abort to the reader, so that it
// sees everything up to the failure and then the abort.
func deliverBuffered(ch *channel, ws *websocket.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), abortDrainTimeout)
	defer cancel()
	for {
		f, _, ok := ch.cs.pop(ch)
		if !ok || ws.Write(ctx, f.typ, f.b) != nil {
			ch.cs.free(ch)
			return
		}
	}
}

func describeClose(err error) string {
	if errors.Is(err, websocket.ErrMessageTooBig) {
		return fmt.Sprintf("a frame larger than %d bytes", protocol.MaxChannelFrame)
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		if ce.Reason != "" {
			return fmt.Sprintf("status %d: %s", int(ce.Code), ce.Reason)
		}
		return fmt.Sprintf("status %d", int(ce.Code))
	}
	return "connection lost"
}
