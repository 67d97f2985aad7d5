package core

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// pendingCall is an invocation the engine forwarded to a worker and awaits. Its outcome goes
// either straight back to the calling connection (no goroutine waits for it) or, for the
// engine's own calls, into ch.
type pendingCall struct {
	fn       string
	iid      string    // the engine's invocation id, the key in the serving worker's pending map
	deadline time.Time // zero: no timeout
	timeout  time.Duration
	caller   *conn
	callerID string
	ch       chan outcome
	end      func(*protocol.Error) // the observer's end of the call's span; nil: none
	retry    *retryCall            // nil: the call goes to no other instance (reroute)
	watch    *watch                // the call's observers (observers.go); nil: none
	e        *Engine               // set with watch and route
	route    *routedCall           // a routed built-in's call (route.go); nil: none

	// reply, for another engine's call (forwardCluster), answers it at once; res is borrowed
	// from the read buffer, so reply must be done with it when it returns.
	reply func(json.RawMessage, *protocol.Error)
}

// retryCall is what a call to a function with several instances keeps to be sent again: a
// worker that unregistered the function while the call was on its way answers
// function_not_found, and reroute gives the call to another instance instead. A call
// to a function with one instance keeps nothing, so pays nothing.
type retryCall struct {
	ns         string
	data, meta json.RawMessage
	tc         traceCtx
	done       bool // sent again once already
}

// newRetry is a retryCall for a call to ns of data, meta and tc, with copies of what the
// caller's read buffer holds.
func newRetry(ns string, data, meta json.RawMessage, tc traceCtx) *retryCall {
	return &retryCall{ns: ns, data: bytes.Clone(data), meta: bytes.Clone(meta),
		tc: traceCtx{strings.Clone(tc.traceparent), strings.Clone(tc.baggage)}}
}

type outcome struct {
	res  json.RawMessage
	perr *protocol.Error
}

func (pc *pendingCall) deliver(res json.RawMessage, perr *protocol.Error) {
	fn := pc.fn
	if r := pc.route; r != nil {
		pc.e.fire(r.watch, res, perr) // the target's observers see its own outcome
		res, perr = r.settle(res, perr)
		fn = r.fn
	}
	if pc.end != nil {
		pc.end(perr)
	}
	if pc.watch != nil {
		pc.e.fire(pc.watch, res, perr)
	}
	if pc.ch != nil {
		pc.ch <- outcome{res, perr}
		return
	}
	if pc.reply != nil {
		pc.reply(res, perr)
		return
	}
	pc.caller.mu.Lock()
	delete(pc.caller.calls, pc.iid)
	pc.caller.mu.Unlock()
	out := &protocol.Message{Type: protocol.TypeInvocationResult, InvocationID: pc.callerID, FunctionID: fn}
	if perr != nil {
		out.Error = perr
	} else {
		out.Result = resultField(res)
	}
	_ = pc.caller.send(out)
}

// called is the function the caller called: a routed built-in's id, else the function's.
func (pc *pendingCall) called() string {
	if pc.route != nil {
		return pc.route.fn
	}
	return pc.fn
}

// resultField is res as an invocationresult carries it: nothing (the key omitted) for a function
// that returned nothing or null, as iii's engine sends it (its result is an Option).
func resultField(res json.RawMessage) json.RawMessage {
	if string(bytes.TrimSpace(res)) == "null" {
		return nil
	}
	return res
}

// take removes and returns the pending call iid of c, nil when it was already settled.
func (c *conn) take(iid string) *pendingCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	pc := c.pending[iid]
	if pc != nil {
		delete(c.pending, iid)
		c.serving.Add(-1)
	}
	return pc
}

// startForward sends an invocation of id to target. With pc nil it is a void call; otherwise pc
// is registered under a fresh invocation id, which is returned.
func (e *Engine) startForward(target *conn, id string, data, meta json.RawMessage, tc traceCtx, timeout time.Duration, pc *pendingCall) (string, *protocol.Error) {
	m := &protocol.Message{Type: protocol.TypeInvokeFunction, FunctionID: target.localID(id), Data: data, Metadata: meta,
		Traceparent: tc.traceparent, Baggage: tc.baggage}
	if pc == nil {
		m.Action = &protocol.Action{Type: "void"}
		if err := target.send(m); err != nil {
			return "", stopped(id)
		}
		return "", nil
	}
	m.InvocationID = e.newID()
	pc.fn, pc.iid = id, m.InvocationID
	if timeout > 0 {
		pc.timeout, pc.deadline = timeout, time.Now().Add(timeout)
	}
	target.mu.Lock()
	if target.ctx.Err() != nil {
		target.mu.Unlock()
		return "", stopped(id)
	}
	target.pending[m.InvocationID] = pc
	target.serving.Add(1)
	target.mu.Unlock()
	if pc.caller != nil {
		pc.caller.mu.Lock()
		gone := pc.caller.calls == nil
		if !gone {
			pc.caller.calls[m.InvocationID] = target
		}
		pc.caller.mu.Unlock()
		if gone {
			target.take(m.InvocationID)
			return "", stopped(id)
		}
	}
	if err := target.send(m); err != nil {
		if target.take(m.InvocationID) == nil {
			return m.InvocationID, nil // settled meanwhile (the target dropped)
		}
		return "", stopped(id)
	}
	return m.InvocationID, nil
}

// forward sends an invocation to the worker serving it and waits for its result. retry is
// non-nil when the function has other instances (see retryCall).
func (e *Engine) forward(ctx context.Context, target *conn, id string, data, meta json.RawMessage, tc traceCtx, timeout time.Duration, void bool, retry *retryCall) (json.RawMessage, *protocol.Error) {
	if void {
		_, perr := e.startForward(target, id, data, meta, tc, timeout, nil)
		return nil, perr
	}
	pc := &pendingCall{ch: make(chan outcome, 1), retry: retry}
	iid, perr := e.startForward(target, id, data, meta, tc, timeout, pc)
	if perr != nil {
		return nil, perr
	}
	select {
	case o := <-pc.ch:
		return o.res, o.perr
	case <-ctx.Done():
		if target.take(iid) == nil {
			o := <-pc.ch
			return o.res, o.perr
		}
		if ctx.Err() == context.DeadlineExceeded {
			return nil, protocol.NewError(errcode.Timeout, "function %s did not answer in time", id)
		}
		return nil, protocol.NewError(errcode.InvocationStopped, "the caller of %s went away", id)
	}
}

// forwardAsync handles an invocation from a worker without a waiting goroutine when it targets
// another worker's function; it reports false when the slower general path must handle it.
func (e *Engine) forwardAsync(c *conn, m *protocol.Message) bool {
	ns := protocol.DefaultNamespace
	if m.Namespace != nil {
		ns = *m.Namespace
	}
	void := m.IsVoid()
	r := e.route(c, nil, ns, m.FunctionID, m.Data, m.Metadata, traceCtx{m.Traceparent, m.Baggage}, void)
	switch r.to {
	case toBuiltin:
		return r.b.route != nil && e.routeAsync(c, m, r.b.route)
	case toCluster:
		return e.forwardToCluster(c, m, ns)
	case toRefused:
		c.sendResult(m, nil, r.perr)
		return true
	}
	timeout := e.callTimeout(m.TimeoutMS)
	if r.f.http != nil {
		e.callHTTPAsync(c, m, r.f.http, r.data, timeout, r.end, r.watch)
		return true
	}
	if void {
		_, perr := e.startForward(r.f.conn, m.FunctionID, r.data, m.Metadata, r.tc, timeout, nil)
		r.end(perr)
		return true
	}
	pc := &pendingCall{caller: c, callerID: m.InvocationID, end: r.end, watch: r.watch, retry: r.retry, e: e}
	if _, perr := e.startForward(r.f.conn, m.FunctionID, r.data, m.Metadata, r.tc, timeout, pc); perr != nil {
		pc.fn = m.FunctionID
		pc.deliver(nil, perr)
	}
	return true
}

// reroute sends pc, which worker c answered with perr, to another instance of its function when
// perr is function_not_found and c no longer serves the function: the call raced c's
// unregistration (a rolling deploy's old worker drops its handler once it unregistered). It
// does so once per call, within the call's deadline, and reports whether it did.
func (e *Engine) reroute(c *conn, pc *pendingCall, perr *protocol.Error) bool {
	rc := pc.retry
	if rc == nil || rc.done || perr.Code != errcode.FunctionNotFound {
		return false
	}
	var next *fnEntry
	serves := false
	e.mu.RLock()
	if head := e.funcs[fkey{rc.ns, pc.fn}]; head != nil {
		head.instances(func(i *fnEntry) {
			switch {
			case i.conn == c:
				serves = true
			case next == nil || i.conn.serving.Load() < next.conn.serving.Load():
				next = i
			}
		})
	}
	e.mu.RUnlock()
	if serves || next == nil || next.http != nil {
		return false
	}
	timeout := pc.timeout
	if !pc.deadline.IsZero() {
		if timeout = time.Until(pc.deadline); timeout <= 0 {
			return false
		}
	}
	rc.done = true
	if pc.caller != nil {
		pc.caller.mu.Lock()
		if pc.caller.calls != nil {
			delete(pc.caller.calls, pc.iid)
		}
		pc.caller.mu.Unlock()
	}
	e.log.Debug("call rerouted: its worker answered function_not_found after unregistering the function",
		"function_id", pc.fn, "namespace", rc.ns, "from", c.id, "to", next.conn.id)
	if _, err := e.startForward(next.conn, pc.fn, rc.data, rc.meta, rc.tc, timeout, pc); err != nil {
		pc.deliver(nil, err)
	}
	return true
}

// sweep answers "timeout" for every forwarded call past its deadline and drops idle stream
// channels, every tick until ctx ends.
func (e *Engine) sweep(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			e.chans.Expire(now)
			e.mu.RLock()
			conns := make([]*conn, 0, len(e.conns))
			for _, c := range e.conns {
				conns = append(conns, c)
			}
			e.mu.RUnlock()
			for _, c := range conns {
				var expired []*pendingCall
				c.mu.Lock()
				for iid, pc := range c.pending {
					if !pc.deadline.IsZero() && now.After(pc.deadline) {
						delete(c.pending, iid)
						c.serving.Add(-1)
						expired = append(expired, pc)
					}
				}
				c.mu.Unlock()
				for _, pc := range expired {
					pc.deliver(nil, protocol.NewError(errcode.Timeout, "function %s did not answer within %dms", pc.called(), pc.timeout.Milliseconds()))
				}
			}
		}
	}
}

// failPending settles every call forwarded to a connection that went away.
func (c *conn) failPending() {
	c.mu.Lock()
	all := c.pending
	c.pending = map[string]*pendingCall{}
	c.serving.Add(-int32(len(all)))
	c.mu.Unlock()
	for _, pc := range all {
		pc.deliver(nil, stopped(pc.fn))
	}
}

// forgetCalls drops the calls c made that workers still serve: c is gone, so their replies have
// nowhere to go.
func (c *conn) forgetCalls() {
	c.mu.Lock()
	calls := c.calls
	c.calls = nil
	c.mu.Unlock()
	for iid, target := range calls {
		target.take(iid)
	}
	if len(calls) > 0 {
		c.e.log.Debug("caller left; its calls in flight were dropped", "worker_id", c.id, "calls", len(calls))
	}
}

// PendingCount reports how many forwarded calls the engine awaits, all workers together.
func (e *Engine) PendingCount() int {
	e.mu.RLock()
	conns := make([]*conn, 0, len(e.conns))
	for _, c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.RUnlock()
	n := 0
	for _, c := range conns {
		c.mu.Lock()
		n += len(c.pending)
		c.mu.Unlock()
	}
	return n
}
