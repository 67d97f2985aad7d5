package stream

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
)

// Hub is the stream WebSocket endpoint, as iii's on its stream port: a client connects (any
// path), sends {type: "join", data: {subscriptionId, streamName, groupId, id?}} and gets a
// Message with event {type: "sync", data} (the item, or the group's items, as they are now),
// then every Message of that group (or item) from any stream worker sharing the store;
// {type: "leave", data: {subscriptionId, ...}} ends the subscription. Frames that are not a
// join or a leave are ignored, as iii does. A client that falls OutboundLimit messages behind
// is disconnected rather than slowing the others.
//
// With AuthFunction set, each connection first calls it with {headers, path, query_params, addr}
// and keeps the context of its answer {context}, which the stream:join and stream:leave
// functions get; a join function answering {unauthorized: true} refuses the join with a Message
// whose event is {type: "unauthorized"}. As iii's, an auth function that fails admits the
// connection without a context (the warning saying so is logged at most once a minute).
//
// Who may connect: any client without an Origin header (SDKs, scripts), and browser pages of
// the port's own origin, of a loopback address, or of Limits.AllowedOrigins; on a loopback bind
// (Loopback) only requests naming a loopback name or an IP address in Host, so a DNS-rebound
// page cannot. Others are refused 403 ORIGIN_FORBIDDEN or HOST_FORBIDDEN before the auth
// function runs. Limits also close sockets that never join or are left without a subscription,
// and cap the sockets held (503 STREAM_CONNECTION_LIMIT).
type Hub struct {
	svc *Service
	sub *nats.Subscription
	// Log reports dropped clients; nil discards.
	Log func(msg string, args ...any)
	// AuthFunction is called for each new connection ("" for none).
	AuthFunction string
	// Limits bound who may connect and for how long (zero fields: defaults). Set before serving.
	Limits Limits
	// Loopback is set when the port listens on a loopback address: the Host header is checked.
	Loopback bool

	mu    sync.Mutex
	conns map[*client]struct{}

	slots                 slots
	authWarn, refusedWarn warnLimiter
}

// OutboundLimit is how many messages a client may have waiting before it is disconnected.
const OutboundLimit = 256

// NewHub subscribes to the namespace's stream messages.
func NewHub(svc *Service) (*Hub, error) {
	h := &Hub{svc: svc, conns: map[*client]struct{}{}}
	sub, err := svc.nc.Subscribe(svc.subject+".>", h.dispatch)
	if err != nil {
		return nil, err
	}
	if err := svc.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	h.sub = sub
	return h, nil
}

// Close ends the subscription and every client.
func (h *Hub) Close() {
	_ = h.sub.Unsubscribe()
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		c.drop(websocket.StatusGoingAway, "stream worker stopping")
	}
}

type subscription struct {
	stream, group string
	id            *string
}

func (s subscription) event(id string, auth json.RawMessage) JoinEvent {
	return JoinEvent{SubscriptionID: id, StreamName: s.stream, GroupID: s.group, ID: s.id, Context: auth}
}

// authenticate calls the auth function for r and returns the context it answers (nil for none).
func (h *Hub) authenticate(r *http.Request) json.RawMessage {
	if h.AuthFunction == "" || h.svc.call == nil {
		return nil
	}
	headers := map[string]string{}
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	query := map[string][]string(r.URL.Query())
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	res, err := h.svc.call.Call(ctx, h.AuthFunction, map[string]any{"headers": headers, "path": r.URL.Path, "query_params": query, "addr": r.RemoteAddr})
	if err != nil {
		h.warn(&h.authWarn, "the stream auth function failed; connection admitted without a context", "function_id", h.AuthFunction, "err", err)
		return nil
	}
	var out struct {
		Context json.RawMessage `json:"context"`
	}
	if json.Unmarshal(res, &out) != nil {
		return nil
	}
	return out.Context
}

type client struct {
	out  chan []byte
	auth json.RawMessage // the auth function's context
	stop context.CancelFunc
	once sync.Once

	mu   sync.Mutex
	subs map[string]subscription
	ws   *websocket.Conn
	// unjoined closes the socket while it has no subscription: JoinTimeout after it connects,
	// IdleTimeout after its last leave.
	unjoined *time.Timer
	idleWhy  string // the close reason when unjoined fires
	pinging  sync.Once
	// syncing counts the joins whose sync is being read; meanwhile messages are held, so none
	// goes out before the sync it may be newer than.
	syncing int
	held    [][]byte
}

func (c *client) drop(code websocket.StatusCode, why string) {
	c.once.Do(func() {
		// The close handshake may take seconds: never under the hub's lock. The connection's
		// context ends after it, so the peer gets code and why, not a bare end of stream.
		go func() {
			_ = c.ws.Close(code, why)
			c.stop()
		}()
	})
}

// wants reports whether one of the client's subscriptions covers m; while a sync is being read
// it holds b instead (and reports false).
func (c *client) wants(m *Message, b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		if s.stream == m.StreamName && s.group == m.GroupID && (s.id == nil || (m.ID != nil && *s.id == *m.ID)) {
			if c.syncing > 0 {
				c.held = append(c.held, b)
				return false
			}
			return true
		}
	}
	return false
}

func (h *Hub) dispatch(msg *nats.Msg) {
	var m Message
	if err := json.Unmarshal(msg.Data, &m); err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		if c.wants(&m, msg.Data) {
			h.queue(c, msg.Data)
		}
	}
}

// queue hands b to c's writer, or drops c when it is OutboundLimit messages behind.
func (h *Hub) queue(c *client, b []byte) {
	select {
	case c.out <- b:
	default:
		if h.Log != nil {
			h.Log("stream client too slow; disconnected", "pending", OutboundLimit)
		}
		c.drop(websocket.StatusPolicyViolation, "too many pending messages")
	}
}

type incoming struct {
	Type string `json:"type"`
	Data struct {
		SubscriptionID string  `json:"subscriptionId"`
		StreamName     string  `json:"streamName"`
		GroupID        string  `json:"groupId"`
		ID             *string `json:"id"`
	} `json:"data"`
}

// ServeHTTP upgrades a request to a stream connection, any path, once the handshake checks and
// the socket caps admit it (see Hub).
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e := h.checkHandshake(r); e != nil {
		h.refuse(w, r, http.StatusForbidden, e)
		return
	}
	lim := h.Limits.withDefaults()
	addr := clientAddr(r)
	if e := h.slots.take(addr, lim); e != nil {
		h.refuse(w, r, http.StatusServiceUnavailable, e)
		return
	}
	defer h.slots.give(addr)
	auth := h.authenticate(r) // before the upgrade, as iii's
	// The origin was checked above, with the engine's rules; coder/websocket's own check (same
	// host only) would refuse the loopback pages admitted there.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(r.Context())
	c := &client{out: make(chan []byte, OutboundLimit), stop: cancel, subs: map[string]subscription{}, ws: ws, auth: auth}
	c.idleWhy = "no stream joined within " + lim.JoinTimeout.String()
	c.unjoined = time.AfterFunc(lim.JoinTimeout, c.closeIfUnjoined)
	h.mu.Lock()
	h.conns[c] = struct{}{}
	h.mu.Unlock()
	defer h.disconnect(c)
	go c.writeLoop(ctx, ws)
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var in incoming
		if json.Unmarshal(b, &in) != nil || in.Data.SubscriptionID == "" || (in.Type == "join" && (in.Data.StreamName == "" || in.Data.GroupID == "")) {
			continue
		}
		switch in.Type {
		case "join":
			h.join(ctx, c, in.Data.SubscriptionID, subscription{stream: in.Data.StreamName, group: in.Data.GroupID, id: in.Data.ID})
			// Pinged once it has joined: before that JoinTimeout bounds it, without a goroutine.
			c.pinging.Do(func() { go c.pingLoop(ctx, lim.PingInterval) })
		case "leave":
			h.leave(ctx, c, in.Data.SubscriptionID)
			c.mu.Lock()
			if len(c.subs) == 0 {
				c.idleWhy = "no subscription for " + lim.IdleTimeout.String()
				c.unjoined.Reset(lim.IdleTimeout)
			}
			c.mu.Unlock()
		}
	}
}

// closeIfUnjoined closes c, saying why, unless it has a subscription now.
func (c *client) closeIfUnjoined() {
	c.mu.Lock()
	n, why := len(c.subs), c.idleWhy
	c.mu.Unlock()
	if n == 0 {
		c.drop(websocket.StatusPolicyViolation, why)
	}
}

// pingLoop pings c every interval until ctx ends; a ping not answered within pingTimeout (or
// interval, when shorter) drops it (the peer went away without closing).
func (c *client) pingLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, min(pingTimeout, interval))
			err := c.ws.Ping(pctx)
			cancel()
			if err != nil { // no close handshake: the peer answers nothing
				c.once.Do(func() {
					c.stop()
					_ = c.ws.CloseNow()
				})
				return
			}
		}
	}
}

// disconnect forgets the connection c, closes it and has each subscription it still had leave.
func (h *Hub) disconnect(c *client) {
	c.unjoined.Stop()
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
	c.drop(websocket.StatusNormalClosure, "")
	c.mu.Lock()
	left := c.subs
	c.subs = nil
	c.mu.Unlock()
	for id, s := range left {
		h.svc.joinLeave(context.Background(), false, s.event(id, c.auth))
	}
}

// writeLoop writes the messages queued on c.out to ws, its WebSocket, until ctx ends; a write
// that fails, or takes over 10 s, drops the connection.
func (c *client) writeLoop(ctx context.Context, ws *websocket.Conn) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-c.out:
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			err := ws.Write(wctx, websocket.MessageText, b)
			wcancel()
			if err != nil {
				c.drop(websocket.StatusInternalError, "write failed")
				return
			}
		}
	}
}

// join subscribes c to s as id once the join hooks admit it (else it answers unauthorized),
// sends what s holds now, then the messages held while it synced.
func (h *Hub) join(ctx context.Context, c *client, id string, s subscription) {
	if h.svc.joinLeave(ctx, true, s.event(id, c.auth)) {
		h.send(c, Message{Type: "stream", Timestamp: time.Now().UnixMilli(), StreamName: s.stream, GroupID: s.group, ID: s.id,
			Event: Event{Type: "unauthorized"}})
		return
	}
	c.mu.Lock()
	c.subs[id] = s
	c.syncing++
	c.unjoined.Stop()
	c.mu.Unlock()
	h.sync(ctx, c, s)
	c.mu.Lock()
	if c.syncing--; c.syncing == 0 {
		for _, b := range c.held {
			h.queue(c, b)
		}
		c.held = nil
	}
	c.mu.Unlock()
}

// leave ends c's subscription id, running the leave hooks when it had one.
func (h *Hub) leave(ctx context.Context, c *client, id string) {
	c.mu.Lock()
	s, ok := c.subs[id]
	delete(c.subs, id)
	c.mu.Unlock()
	if ok {
		h.svc.joinLeave(ctx, false, s.event(id, c.auth))
	}
}

// sync sends a new subscription what its item or group holds now. Messages held meanwhile follow
// it: some may be older than what it holds, none is lost.
func (h *Hub) sync(ctx context.Context, c *client, s subscription) {
	var data json.RawMessage
	if s.id != nil {
		v, err := h.svc.get(ctx, s.stream, s.group, *s.id)
		if err != nil {
			return
		}
		data = v
	} else {
		items, err := h.svc.list(ctx, s.stream, s.group)
		if err != nil {
			return
		}
		data, _ = json.Marshal(items)
	}
	h.send(c, Message{Type: "stream", Timestamp: time.Now().UnixMilli(), StreamName: s.stream, GroupID: s.group, ID: s.id,
		Event: Event{Type: "sync", Data: data}})
}

// send queues m for c.
func (h *Hub) send(c *client, m Message) {
	if b, err := json.Marshal(m); err == nil {
		h.queue(c, b)
	}
}
