package core

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/cluster"
	"github.com/iii-go/iii/engine/core/channels"
	"github.com/iii-go/iii/engine/httpfn"
	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/observe"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/engine/triggers"
	"github.com/iii-go/iii/internal/base/errcode"
)

// NamespacePolicy protects one namespace with a project token kept in a file (mode 0600). Token
// files are read on every check, so a replaced token takes effect at once.
type NamespacePolicy struct {
	TokenFile string // the project token: admits registrations into the namespace
	// OwnerTokenFile, when set, holds a second token that also admits registrations and grants
	// the owner-only engine functions. Only the process that started the engine (Compose) holds
	// it; the project's workers get the project token and no owner rights.
	OwnerTokenFile string
}

// Options configure an Engine.
type Options struct {
	// Grace is how long registrations that arrive before engine::workers::register wait for it
	// before they are applied in the default namespace.
	Grace      time.Duration
	Namespaces map[string]NamespacePolicy
	// OwnerTokenFile, when set, holds a token that grants the owner-only engine functions
	// without admitting anything else: the owner credential an engine with no Namespaces writes
	// for a Compose of its user (package tokens).
	OwnerTokenFile string
	Logger         *slog.Logger
	// ChannelIdle is how long a stream channel may sit without traffic before it is aborted and
	// forgotten (default DefaultChannelIdle).
	ChannelIdle time.Duration

	// AllowedOrigins lists the browser origins whose pages may open a WebSocket (config.yaml
	// iii-worker-manager allowed_origins): host patterns ("localhost:3000", "*.example.com") or,
	// with a scheme, origin patterns ("https://app.example.com"), matched with path.Match. A
	// handshake without Origin (SDKs, Go and Node workers) and a same-origin one are always
	// allowed; any other is refused ORIGIN_FORBIDDEN.
	AllowedOrigins []string

	// HTTP serves HTTP-invoked functions (config.yaml iii-http-functions); nil: one with
	// httpfn.DefaultSecurity, as iii's always-loaded worker.
	HTTP *httpfn.Invoker

	// Limits; zero means the default of limits.go (README.md, "Limits").
	HandshakeTimeout time.Duration
	WriteTimeout     time.Duration
	QueueBytes       int
	QueueFrames      int
	FrameBudget      int
	FrameTimeout     time.Duration
	FrameMinRate     int
	MaxInflight      int
	MaxCallTimeout   time.Duration
	RegisterTimeout  time.Duration
	ChannelBytes     int
	ChannelBudget    int
	MaxChannels      int
	ChannelShare     int // channels one connection of an ungated listener may hold; default MaxChannels/4
	ChannelAttach    time.Duration
}

// Caller describes the connection that invoked a built-in function.
type Caller struct {
	WorkerID  string
	Name      string
	Namespace string // "" when the caller never registered
	Owner     bool   // presented a namespace's owner token

	conn   *conn // nil for the engine's own calls
	inSpan bool  // a call made within the span of the built-in call it serves (Relay): no span of its own
}

// Builtin serves an engine function. Return a *protocol.Error to choose the error code.
type Builtin func(ctx context.Context, c Caller, payload json.RawMessage) (any, error)

type builtin struct {
	fn          Builtin
	description string
	inline      bool   // HandleInline: served on the caller's read loop, without a goroutine
	route       Router // HandleRouted: picks where a call goes without fn; nil: none
}

type fkey struct{ ns, id string }

type fnEntry struct {
	conn  *conn
	frame *protocol.Message
	http  *httpfn.Function // an HTTP-invoked function (httpfn.go); nil: served by conn
	more  []*fnEntry       // the function's other live instances (instances.go), in arrival order
}

// Engine routes functions between connected workers.
type Engine struct {
	opts Options
	log  *slog.Logger

	mu       sync.RWMutex
	builtins map[string]builtin
	funcs    map[fkey]*fnEntry
	conns    map[string]*conn
	chans    *channels.Table
	claim    *fkey // ClaimPrefix: {namespace, id prefix} kept to one worker, nil when none
	triggers *triggers.Registry
	gateFns  map[string]string // function ids the listeners' gates call (listener.go) -> the listener naming it

	frames budget   // bytes of the frames being read, all connections together
	obs    Observer // SetObserver; nil: none

	observers *observe.Registry // observers of calls (observers.go)

	cluster   *cluster.Cluster // JoinCluster; nil: the engine runs alone (cluster.go)
	clusterMu sync.Mutex       // orders syncCluster's snapshots
}

// budget is the engine-wide byte budget of the frames being read. A connection takes from it
// as its frames' bytes arrive and keeps what its reused read buffer holds; it may hold at most
// share. When a take would pass the limit, the connection holding the most gives way: it is
// evicted (closed), and what it held counts as given back at once, unless the one asking holds
// the most, which is then refused.
type budget struct {
	limit, share int64

	mu      sync.Mutex
	used    int64
	holders map[*holder]struct{} // those holding something
}

// holder is one connection's part of the budget.
type holder struct {
	held    int64  // guarded by budget.mu
	evicted bool   // the budget took back what it held: it gets nothing more
	refused string // why the last take failed
	evict   func() // closes the connection, called once, on a goroutine of its own
}

// take reserves n more bytes for h, or reports false (reserving nothing).
func (b *budget) take(h *holder, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case h.evicted:
		h.refused = "this connection was closed to make room for others"
		return false
	case h.held+n > b.share:
		h.refused = fmt.Sprintf("this connection would be reading %d KiB of frames, past its share of %d KiB", (h.held+n)>>10, b.share>>10)
		return false
	}
	for b.used+n > b.limit {
		var big *holder
		for o := range b.holders {
			if o != h && (big == nil || o.held > big.held) {
				big = o
			}
		}
		if big == nil || big.held <= h.held+n {
			h.refused = fmt.Sprintf("the engine's %d MiB frame budget is spent and this connection holds the most", b.limit>>20)
			return false
		}
		b.used -= big.held
		big.held, big.evicted = 0, true
		delete(b.holders, big)
		go big.evict()
	}
	if b.holders == nil {
		b.holders = map[*holder]struct{}{}
	}
	b.holders[h] = struct{}{}
	h.held += n
	b.used += n
	return true
}

// keep gives back what h holds beyond n bytes.
func (b *budget) keep(h *holder, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.evicted || h.held <= n {
		return
	}
	b.used -= h.held - n
	h.held = n
	if n == 0 {
		delete(b.holders, h)
	}
}

// inUse is how many bytes are held.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// New returns an engine with the engine::workers::* and engine::functions::list built-ins.
func New(opts Options) *Engine {
	opts = opts.withDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HTTP == nil {
		opts.HTTP, _ = httpfn.New(httpfn.DefaultSecurity(), nil) // the default allowlist is valid
	}
	e := &Engine{
		opts: opts, log: opts.Logger,
		builtins: map[string]builtin{}, funcs: map[fkey]*fnEntry{}, conns: map[string]*conn{},
		chans: newChannels(opts),
	}
	e.frames.limit = int64(opts.FrameBudget)
	e.frames.share = max(e.frames.limit/4, 1)
	e.Handle(protocol.FnRegisterWorker, "Announce a worker: name, namespace, runtime", nil)
	e.HandleInline(protocol.FnListWorkers, "List connected workers and their functions (in a cluster, the other engines' too)", e.listClusterWorkers)
	e.HandleInline(protocol.FnListFunctions, "List functions by namespace (optional {namespace})", e.listFunctions)
	e.HandleInline(protocol.FnCreateChannel, "Create a stream channel: {buffer_size?} -> {channel_id, reader, writer}", channelBuiltin(e.chans.Create))
	e.HandleInline(protocol.FnRemoveChannel, "Abort and forget a stream channel: {channel_id, access_key (of either end)}", channelBuiltin(e.chans.Remove))
	e.HandleInline(protocol.FnCreateChannels, "Create several stream channels, all or none: {count, buffer_size?} -> {channels: [{channel_id, reader, writer}]}", channelBuiltin(e.chans.CreateMany))
	e.Handle(protocol.FnAwaitPeer, "Wait until the other end of one of the channels connects, or one is gone: {channels: [{channel_id, access_key}]} -> {channel_id, attached}", channelBuiltin(e.chans.AwaitPeer))
	e.HandleInline(protocol.FnRemoveChannels, "Abort and forget several stream channels: {channels: [{channel_id, access_key}]}", channelBuiltin(e.chans.RemoveMany))
	e.initTriggers()
	e.initObservers()
	return e
}

// Handle adds a built-in function, served in every namespace and listed in default.
func (e *Engine) Handle(id, description string, fn Builtin) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.builtins[id] = builtin{fn: fn, description: description}
}

// HandleInline adds a built-in function like Handle, for one that never blocks (it only reads
// or updates the engine's own state): a call to it is served on the caller's read loop instead
// of a goroutine of its own, and does not count against Options.MaxInflight.
func (e *Engine) HandleInline(id, description string, fn Builtin) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.builtins[id] = builtin{fn: fn, description: description, inline: true}
}

// Lookup reports which worker connection serves id in ns.
func (e *Engine) Lookup(ns, id string) (workerID string, ok bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	f := e.funcs[fkey{ns, id}]
	if f == nil {
		return "", false
	}
	return f.conn.id, true
}

// WorkerGone returns a channel closed when the worker connection id disconnects (already closed
// when no such connection exists).
func (e *Engine) WorkerGone(id string) <-chan struct{} {
	e.mu.RLock()
	c := e.conns[id]
	e.mu.RUnlock()
	if c == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return c.ctx.Done()
}

// newID is a fresh invocation id: a random UUID, the type iii's SDKs decode it as.
func (e *Engine) newID() string { return newUUID() }

// Handler is the HTTP handler of the main worker listener (Options' origins, no Host check):
// /ws/channels/{id} upgrades to one end of a stream channel, /otel takes SDK telemetry, every
// other path upgrades to a worker connection.
func (e *Engine) Handler() http.Handler {
	return e.handler(&listener{Listener: e.mainListener()})
}

func (e *Engine) handler(l *listener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := e.checkHandshake(l, r); h != nil {
			e.refuse(w, r, h)
			return
		}
		if id, ok := strings.CutPrefix(r.URL.Path, protocol.ChannelPathPrefix); ok {
			e.serveChannel(w, r, id, l)
			return
		}
		if r.URL.Path == "/otel" {
			ws, err := websocket.Accept(w, r, acceptOptions(l))
			if err != nil {
				return
			}
			ws.SetReadLimit(protocol.MaxFrameBytes)
			if l.gated() {
				if _, perr := e.authenticate(l, r); perr != nil {
					e.log.Warn("telemetry connection refused by the listener's auth", "listener", l.Name, "code", perr.Code, "reason", perr.Message)
					_ = ws.Close(websocket.StatusPolicyViolation, AuthError)
					return
				}
			}
			e.drainTelemetry(ws) // SDK telemetry: given to the observer, never listed as a worker
			return
		}
		ws, err := batchconn.Accept(w, r, e.opts.WriteTimeout)
		if err != nil {
			return
		}
		ws.SetReadLimit(protocol.MaxFrameBytes)
		ws.SetFrameTimeout(e.opts.FrameTimeout, e.opts.FrameMinRate)
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var session *rbac.Session
		if l.gated() {
			var perr *protocol.Error
			if session, perr = e.authenticate(l, r); perr != nil {
				e.refuseSession(l, r, ws, perr)
				return
			}
		}
		e.serveConn(ws, strings.TrimSpace(token), l, session)
	})
}

// acceptOptions lets coder/websocket (channels, /otel) check the origin too, with the same
// patterns as checkHandshake (which has already refused anything else with a coded message).
func acceptOptions(l *listener) *websocket.AcceptOptions {
	return &websocket.AcceptOptions{OriginPatterns: l.AllowedOrigins}
}

// drainTelemetry reads the frames of a telemetry-only /otel socket until the peer goes away,
// handing each "OTLP", "MTRC" or "LOGS" frame to the observer (dropped without one).
func (e *Engine) drainTelemetry(ws *websocket.Conn) {
	defer ws.CloseNow()
	for {
		_, b, err := ws.Read(context.Background())
		if err != nil {
			return
		}
		e.telemetry("", b)
	}
}

// telemetry hands an SDK telemetry frame (a 4-byte signal prefix, then OTLP/JSON) to the
// observer; it reports false for a frame that is not one.
func (e *Engine) telemetry(workerID string, b []byte) bool {
	if len(b) < 4 {
		return false
	}
	switch sig := string(b[:4]); sig {
	case "OTLP", "MTRC", "LOGS":
		if e.obs != nil {
			e.obs.Telemetry(workerID, sig, b[4:])
		}
		return true
	}
	return false
}

// Serve accepts workers on ln, the main listener (Options' origins and handshake deadline),
// until ctx ends, then closes every connection.
func (e *Engine) Serve(ctx context.Context, ln net.Listener) error {
	return e.ServeAll(ctx, []Bound{{Listener: e.mainListener(), Net: ln}})
}

// ServeAll accepts workers on every listener until ctx ends, then closes every connection. A
// listener that fails closes the others and its error is returned.
func (e *Engine) ServeAll(ctx context.Context, bound []Bound) error {
	go e.sweep(ctx, 20*time.Millisecond)
	e.reserveGateFunctions(bound)
	errc := make(chan error, len(bound))
	srvs := make([]*http.Server, 0, len(bound))
	for _, b := range bound {
		l := &listener{Listener: b.Listener, loopback: isLoopbackAddr(b.Net.Addr())}
		if l.HandshakeTimeout <= 0 {
			l.HandshakeTimeout = e.opts.HandshakeTimeout
		}
		srv := &http.Server{Handler: e.handler(l), ReadHeaderTimeout: l.HandshakeTimeout}
		srvs = append(srvs, srv)
		go func() { errc <- srv.Serve(batchconn.Listener{Listener: b.Net, WriteTimeout: e.opts.WriteTimeout}) }()
	}
	select {
	case err := <-errc:
		for _, b := range bound {
			_ = b.Net.Close()
		}
		return err
	case <-ctx.Done():
	}
	for _, b := range bound {
		_ = b.Net.Close()
	}
	e.chans.CloseAll(200 * time.Millisecond)
	e.mu.RLock()
	conns := make([]*conn, 0, len(e.conns))
	for _, c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.RUnlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() {
				_ = c.ws.CloseStatus(batchconn.StatusGoingAway, "engine shutting down", 200*time.Millisecond)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(200 * time.Millisecond):
				_ = c.ws.Close()
			}
		}()
	}
	wg.Wait()
	for _, srv := range srvs {
		_ = srv.Close()
	}
	if e.cluster != nil {
		e.cluster.Close()
	}
	return nil
}

// Invoke calls id in ns on behalf of the engine itself (used by the sandbox router) and returns
// its raw result. timeout 0 waits until ctx ends.
func (e *Engine) Invoke(ctx context.Context, ns, id string, payload json.RawMessage, timeout time.Duration) (json.RawMessage, *protocol.Error) {
	tp, bg := TraceFromContext(ctx)
	return e.dispatch(ctx, engineCaller, ns, id, payload, nil, traceCtx{tp, bg}, timeout, false)
}

// traceCtx is the W3C trace context an invocation carries.
type traceCtx struct{ traceparent, baggage string }

type traceKey struct{}

// TraceFromContext is the trace context of the invocation a built-in serves: the traceparent
// of the engine's span for the call (or the caller's, with no observer) and the caller's baggage.
func TraceFromContext(ctx context.Context) (traceparent, baggage string) {
	tc, _ := ctx.Value(traceKey{}).(traceCtx)
	return tc.traceparent, tc.baggage
}

// dispatch serves a call for a Go caller that waits for its outcome (Invoke, Relay, a built-in,
// an observer, another engine's call): route finds its target, and dispatch runs it.
func (e *Engine) dispatch(ctx context.Context, caller Caller, ns, id string, data, meta json.RawMessage, tc traceCtx, timeout time.Duration, void bool) (res json.RawMessage, perr *protocol.Error) {
	r := e.route(caller.conn, &caller, ns, id, data, meta, tc, void)
	if r.end == nil {
		// route opens no span for a call it leaves to the caller: a waiting caller's call has
		// one whatever serves it, a refused one naming the worker that serves the function.
		r.tc.traceparent, r.end = e.startCall(caller, ns, id, tc.traceparent, tc.baggage, r.f)
	}
	defer func() {
		r.end(perr)
		e.fire(r.watch, res, perr)
	}()
	switch r.to {
	case toBuiltin:
		if !void {
			r.watch = e.watchCall(caller, protocol.DefaultNamespace, id, r.data, meta, r.tc)
		}
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return runBuiltin(context.WithValue(ctx, traceKey{}, r.tc), r.b.fn, caller, r.data, id, timeout)
	case toCluster:
		if res, perr, found := e.callCluster(ctx, caller, ns, id, r.data, meta, r.tc, timeout, void); found {
			return res, perr
		}
		return nil, e.notFound(ns, id)
	case toRefused:
		return nil, r.perr
	}
	if r.f.http != nil {
		return e.callHTTP(ctx, r.f.http, r.data, timeout)
	}
	return e.forward(ctx, r.f.conn, id, r.data, meta, r.tc, timeout, void, r.retry)
}

func runBuiltin(ctx context.Context, fn Builtin, caller Caller, data json.RawMessage, id string, timeout time.Duration) (res json.RawMessage, perr *protocol.Error) {
	defer func() {
		if r := recover(); r != nil {
			perr = protocol.NewError(errcode.InvocationFailed, "%s panicked: %v", id, r)
		}
	}()
	out, err := fn(ctx, caller, data)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded && timeout > 0 {
			return nil, protocol.NewError(errcode.Timeout, "function %s did not answer within %dms", id, timeout.Milliseconds())
		}
		return nil, protocol.AsError(err)
	}
	if raw, ok := out.(json.RawMessage); ok {
		return raw, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // an encoder, to leave <, > and & in values as they were stored
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, protocol.NewError(errcode.InvocationFailed, "%s: result is not JSON: %v", id, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func (e *Engine) notFound(ns, id string) *protocol.Error {
	e.mu.RLock()
	var elsewhere []string
	for k := range e.funcs {
		if k.id == id && k.ns != ns {
			elsewhere = append(elsewhere, k.ns)
		}
	}
	e.mu.RUnlock()
	msg := "Function " + id + " not found in namespace " + ns + "."
	if len(elsewhere) > 0 {
		sort.Strings(elsewhere)
		msg += " It is registered in namespace(s): " + strings.Join(elsewhere, ", ") + "."
	} else if strings.HasPrefix(id, "compose::") {
		msg += composeHint(ns, id)
	}
	return &protocol.Error{Code: errcode.FunctionNotFound, Message: msg}
}

// composeHint explains a compose::* call that no Compose daemon serves. compose::add only edits
// a compose file that exists, so with no project it has nothing to edit: the fix is a file that
// declares the containers, started in that namespace (req E6).
func composeHint(ns, id string) string {
	hint := " No Compose project runs in namespace " + ns + " on this engine: start one with `iii compose --up -n " + ns + "` in its directory."
	if id == "compose::add" {
		hint += " compose::add has nothing to edit: it only edits a compose file that exists, and a file with no engine: section must declare at least one container." +
			" Write a worker-compose.yaml that declares the containers instead, for the sandbox adapter:" +
			" `containers: {sandbox-libkrun: {worker: package://sandbox-libkrun, version: '^0.3'}}`, then run `iii compose --up -n " + ns + "` beside it."
	}
	return hint
}

func stopped(id string) *protocol.Error {
	return protocol.NewError(errcode.InvocationStopped, "the worker serving %s disconnected before replying", id)
}

// reserved reports whether a worker may not register id: the engine's own families.
func reserved(id string) bool { return protocol.IsEngineFunction(id) }

// mayServeEngineID reports whether c may register the reserved id: as in iii, an engine::* id
// that the engine does not serve itself may be registered in default, where iii's own
// infrastructure workers (its console's engine::console::*, a queue worker's engine::queue::*)
// live, by a connection outside a gated session. configuration::* and sandbox::* stay the
// engine's, a built-in is never shadowed, and an RBAC session never serves engine ids, so a
// caller a gate admits cannot stand in for infrastructure.
func (e *Engine) mayServeEngineID(c *conn, ns, id string) bool {
	if ns != protocol.DefaultNamespace || c.session != nil || !strings.HasPrefix(id, "engine::") {
		return false
	}
	e.mu.RLock()
	_, builtin := e.builtins[id]
	e.mu.RUnlock()
	return !builtin
}

// workerRow is one row of engine::workers::list: iii's WorkerSummary (its optional strings null
// when unknown; status "connected", as iii's for a live connection; ip_address null, as iii's
// without an RBAC session, and the peer's address for a connection of a gated listener) and
// this engine's pid, registered, functions and connected_at.
type workerRow struct {
	ID                string   `json:"id"`
	Name              string   `json:"name"`
	Namespace         string   `json:"namespace"`
	Description       *string  `json:"description"`
	Version           *string  `json:"version"`
	Runtime           *string  `json:"runtime"`
	OS                *string  `json:"os"`
	Status            string   `json:"status"`
	FunctionCount     int      `json:"function_count"`
	ConnectedAtMS     int64    `json:"connected_at_ms"`
	ActiveInvocations int      `json:"active_invocations"`
	Isolation         *string  `json:"isolation"`
	IPAddress         *string  `json:"ip_address"`
	PID               int      `json:"pid,omitempty"`
	Registered        bool     `json:"registered"`
	Functions         []string `json:"functions"`
	ConnectedAt       string   `json:"connected_at"`
}

// matchesWorker applies engine::workers::list's filters to w: search is a case-insensitive
// substring of the name, runtime and status match exactly.
func matchesWorker(w workerRow, search, runtime, status string) bool {
	return (search == "" || strings.Contains(strings.ToLower(w.Name), strings.ToLower(search))) &&
		(runtime == "" || w.Runtime != nil && *w.Runtime == runtime) && (status == "" || status == w.Status)
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// listWorkers answers engine::workers::list {search?, runtime?, status?}, iii's filters: search
// is a case-insensitive substring of the name, runtime and status match exactly.
//
// A session of a gated listener sees, as in engine::functions::list, only the functions it may
// call, and only the workers that serve one of them, besides its own connection.
func (e *Engine) listWorkers(_ context.Context, caller Caller, payload json.RawMessage) (any, error) {
	var in struct {
		Search  string `json:"search"`
		Runtime string `json:"runtime"`
		Status  string `json:"status"`
	}
	if len(payload) > 0 && string(payload) != "null" {
		if err := json.Unmarshal(payload, &in); err != nil {
			return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {search?, runtime?, status?}: %v", protocol.FnListWorkers, err)
		}
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	byConn := map[*conn][]string{}
	for k, f := range e.funcs {
		if e.mayList(caller.conn, k.id, k.ns, f.frame.Metadata) {
			f.instances(func(i *fnEntry) { byConn[i.conn] = append(byConn[i.conn], k.id) })
		}
	}
	out := []workerRow{}
	for _, c := range e.conns {
		if caller.conn != nil && caller.conn.session != nil && c != caller.conn && len(byConn[c]) == 0 {
			continue
		}
		c.mu.Lock()
		w := workerRow{ID: c.id, Name: c.info.Name, Namespace: c.nsOrDefault(), Runtime: orNull(c.info.Runtime),
			Version: orNull(c.info.Version), Description: orNull(c.info.Description), OS: orNull(c.info.OS),
			Status: "connected", ConnectedAtMS: c.connectedAt.UnixMilli(), ActiveInvocations: len(c.pending),
			Isolation: orNull(c.info.Isolation), IPAddress: orNull(c.sessionIP()), PID: c.info.PID, Registered: c.registered, Functions: byConn[c],
			ConnectedAt: c.connectedAt.UTC().Format(time.RFC3339)}
		c.mu.Unlock()
		if w.Functions == nil {
			w.Functions = []string{}
		}
		sort.Strings(w.Functions)
		w.FunctionCount = len(w.Functions)
		if !matchesWorker(w, in.Search, in.Runtime, in.Status) {
			continue
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ID < out[j].ID
	})
	return map[string]any{"workers": out}, nil
}

func (e *Engine) listFunctions(_ context.Context, caller Caller, payload json.RawMessage) (any, error) {
	var in struct {
		Namespace string `json:"namespace"`
	}
	_ = json.Unmarshal(payload, &in)
	type fn struct {
		FunctionID     string          `json:"function_id"`
		Namespace      string          `json:"namespace"`
		Description    string          `json:"description,omitempty"`
		WorkerID       string          `json:"worker_id"`
		WorkerName     string          `json:"worker_name,omitempty"`
		RequestFormat  json.RawMessage `json:"request_format,omitempty"`
		ResponseFormat json.RawMessage `json:"response_format,omitempty"`
		Engine         string          `json:"engine,omitempty"` // a function of another engine of the cluster
	}
	e.mu.RLock()
	out := []fn{}
	for id, b := range e.builtins {
		if (in.Namespace == "" || in.Namespace == protocol.DefaultNamespace) && e.mayList(caller.conn, id, protocol.DefaultNamespace, nil) {
			out = append(out, fn{FunctionID: id, Namespace: protocol.DefaultNamespace, Description: b.description, WorkerID: "engine", WorkerName: "engine"})
		}
	}
	for k, f := range e.funcs {
		if in.Namespace != "" && in.Namespace != k.ns || !e.mayList(caller.conn, k.id, k.ns, f.frame.Metadata) {
			continue
		}
		f.conn.mu.Lock()
		name := f.conn.info.Name
		f.conn.mu.Unlock()
		out = append(out, fn{FunctionID: k.id, Namespace: k.ns, Description: f.frame.Description, WorkerID: f.conn.id,
			WorkerName: name, RequestFormat: f.frame.RequestFormat, ResponseFormat: f.frame.ResponseFormat})
	}
	e.mu.RUnlock()
	if e.cluster != nil {
		local := make(map[fkey]bool, len(out))
		for _, f := range out {
			local[fkey{f.Namespace, f.FunctionID}] = true
		}
		for _, r := range e.cluster.Remote() {
			k := fkey{r.Namespace, r.FunctionID}
			if local[k] || in.Namespace != "" && in.Namespace != r.Namespace || !e.mayList(caller.conn, r.FunctionID, r.Namespace, nil) {
				continue
			}
			local[k] = true // one row per function, whichever engines serve it
			out = append(out, fn{FunctionID: r.FunctionID, Namespace: r.Namespace, Description: r.Description,
				WorkerID: r.WorkerID, WorkerName: r.WorkerName, Engine: r.Engine})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].FunctionID < out[j].FunctionID
	})
	return map[string]any{"functions": out}, nil
}
