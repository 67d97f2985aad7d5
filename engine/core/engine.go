package core

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/cluster"
	"github.com/iii-go/iii/engine/core/channels"
	"github.com/iii-go/iii/engine/httpfn"
	"github.com/iii-go/iii/engine/observe"
	"github.com/iii-go/iii/engine/protocol"
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
