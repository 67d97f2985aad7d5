package core

import (
	"context"
	"encoding/json"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

// routeKind is what serves a call route looked up.
type routeKind uint8

const (
	toLocal   routeKind = iota // an instance of a function of this engine: a worker's or HTTP-invoked
	toBuiltin                  // a built-in function
	toCluster                  // nothing here: another engine of the cluster, if any, or none
	toRefused                  // a protected function the caller may not call
)

// routed is where route sends one call, and what the call keeps until it settles. Only a call
// to a local function (toLocal) has its span, watch and retry opened: the others are settled
// or passed on by the caller.
type routed struct {
	to    routeKind
	b     builtin               // toBuiltin: the built-in
	f     *fnEntry              // toLocal, toRefused: the instance that serves the function
	data  json.RawMessage       // the payload, null for none
	perr  *protocol.Error       // toRefused: the FORBIDDEN answer
	tc    traceCtx              // the trace context the call carries on: its span's traceparent
	end   func(*protocol.Error) // the end of the call's span; nil: route opened none
	watch *watch                // the call's observers; nil: none (a void call)
	retry *retryCall            // a call to a function with several instances; nil: none
}

// route is the routing both kinds of caller share: a worker's call answered when its target
// replies (forwardAsync) and a Go caller's that waits (dispatch). It finds what serves id in
// ns (a built-in first, else the instance with the fewest calls in flight), refuses the
// connection from (nil: the engine) a protected function whose token it lacks, and for a local
// function opens the call's span and observers' watch and keeps what a retry on another
// instance needs. caller is the Go caller; nil stands for from's, read (under its lock) only
// once the call reaches a local function.
func (e *Engine) route(from *conn, caller *Caller, ns, id string, data, meta json.RawMessage, tc traceCtx, void bool) (r routed) {
	b, isBuiltin, f, several := e.lookup(ns, id)
	r.data, r.tc = data, tc
	if len(r.data) == 0 {
		r.data = json.RawMessage("null")
	}
	switch {
	case isBuiltin && b.fn != nil: // engine::workers::register has none: the read loop serves it
		r.to, r.b = toBuiltin, b
		return r
	case f == nil:
		r.to = toCluster
		return r
	case !e.mayCall(from, f):
		r.to, r.f, r.perr = toRefused, f, forbidden(from, ns, id, f)
		return r
	}
	r.f = f
	var who Caller
	if caller != nil {
		who = *caller
	} else {
		who = from.caller()
	}
	r.tc.traceparent, r.end = e.startCall(who, ns, id, tc.traceparent, tc.baggage, f)
	if void {
		return r
	}
	r.watch = e.watchCall(who, ns, id, r.data, meta, r.tc)
	if several && f.http == nil {
		r.retry = newRetry(ns, r.data, meta, r.tc)
	}
	return r
}

// lookup is the built-in id names and the instance of id in ns a call goes to (pick), and
// whether the function has several instances.
func (e *Engine) lookup(ns, id string) (b builtin, isBuiltin bool, f *fnEntry, several bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	b, isBuiltin = e.builtins[id]
	head := e.funcs[fkey{ns, id}]
	return b, isBuiltin, head.pick(), head != nil && len(head.more) > 0
}

// Route is where a routed built-in (HandleRouted) sends one call: straight to FunctionID in
// Namespace, as the engine's own call (the caller's rights on that function are not checked,
// as with Invoke), with the caller's payload, trace context and timeout, and no goroutine,
// decode or copy beyond what forwarding between two workers costs.
type Route struct {
	Namespace, FunctionID string
	// WorkerID is the worker connection the router chose (Lookup): a call that another
	// connection would serve, or several, goes through the built-in instead.
	WorkerID string
	// Result rewrites a successful reply before the caller gets it; nil passes it unchanged.
	// Its input is valid only during the call (it may be returned as it is).
	Result func(json.RawMessage) json.RawMessage
	// Error rewrites an error the function, its worker's departure or the timeout gave; nil
	// passes it unchanged.
	Error func(*protocol.Error) *protocol.Error
}

// Router picks the Route of one call of a routed built-in from its payload (the frame's bytes,
// valid only during the call; most routers need only the function). It runs on the caller's
// read loop, so it must not block; false sends the call through the built-in (whatever needs a
// wait or answers an error of its own: an adapter not asked yet, none bound).
type Router func(payload json.RawMessage) (Route, bool)

// HandleRouted adds a built-in function like Handle whose calls route sends, when it can,
// straight to a worker's function by rewriting the function id of the frame it arrived in: one
// span (the built-in's, naming the serving worker), the caller's observers of id and the
// observers of the target function, as two calls would have. Void calls, and calls route
// declines, go to fn, which must answer alike.
func (e *Engine) HandleRouted(id, description string, fn Builtin, route Router) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.builtins[id] = builtin{fn: fn, description: description, route: route}
}

// routedCall is what a call sent by a Route keeps for its reply: the built-in id the caller
// called (the reply's function_id and the timeout message name it), the route's rewrites, and
// the watch of the target function's observers.
type routedCall struct {
	fn     string
	result func(json.RawMessage) json.RawMessage
	err    func(*protocol.Error) *protocol.Error
	watch  *watch
}

// settle is the outcome the caller gets for the target's res and perr.
func (r *routedCall) settle(res json.RawMessage, perr *protocol.Error) (json.RawMessage, *protocol.Error) {
	if perr != nil {
		if r.err != nil {
			perr = r.err(perr)
		}
		return nil, perr
	}
	if r.result != nil {
		res = r.result(res)
	}
	return res, nil
}

// engineCaller is the caller of the engine's own calls (Invoke, a Route's target).
var engineCaller = Caller{WorkerID: "engine", Name: "engine", Namespace: protocol.DefaultNamespace}

// routeAsync sends m, a call of a routed built-in, where route says, with the caller's reply
// settled when the worker answers; it reports false, having sent nothing, when the built-in
// must serve the call.
func (e *Engine) routeAsync(c *conn, m *protocol.Message, route Router) bool {
	if m.IsVoid() {
		return false
	}
	ns, perr := requestNamespace(m.Namespace)
	if perr != nil {
		return false
	}
	rt, ok := route(m.Data)
	if !ok {
		return false
	}
	_, _, f, several := e.lookup(rt.Namespace, rt.FunctionID)
	if f == nil || several || f.http != nil || f.conn.id != rt.WorkerID {
		return false
	}
	data := m.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	caller := c.caller()
	tp, end := e.startCall(caller, ns, m.FunctionID, m.Traceparent, m.Baggage, f)
	tc := traceCtx{tp, m.Baggage}
	pc := &pendingCall{caller: c, callerID: m.InvocationID, end: end, e: e,
		watch: e.watchCall(caller, protocol.DefaultNamespace, m.FunctionID, data, m.Metadata, tc),
		route: &routedCall{fn: m.FunctionID, result: rt.Result, err: rt.Error,
			watch: e.watchCall(engineCaller, rt.Namespace, rt.FunctionID, data, nil, tc)}}
	// Like Invoke, the engine's call carries no metadata of the caller's.
	if _, perr := e.startForward(f.conn, rt.FunctionID, data, nil, tc, e.callTimeout(m.TimeoutMS), pc); perr != nil {
		pc.fn = rt.FunctionID
		pc.deliver(nil, perr)
	}
	return true
}

// Relay calls id in ns for the built-in whose call ctx serves, within that call's span: it
// opens no span of its own (its observers still fire), so a call a built-in passes on to a
// worker is one span, as on a Route. It returns the raw result; timeout 0 waits until ctx ends.
func (e *Engine) Relay(ctx context.Context, ns, id string, payload json.RawMessage, timeout time.Duration) (json.RawMessage, *protocol.Error) {
	tp, bg := TraceFromContext(ctx)
	caller := engineCaller
	caller.inSpan = true
	return e.dispatch(ctx, caller, ns, id, payload, nil, traceCtx{tp, bg}, timeout, false)
}
