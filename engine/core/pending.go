package core

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
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
}

type outcome struct {
	res  json.RawMessage
	perr *protocol.Error
}

func (pc *pendingCall) deliver(res json.RawMessage, perr *protocol.Error) {
	if pc.end != nil {
		pc.end(perr)
	}
	if pc.ch != nil {
		pc.ch <- outcome{res, perr}
		return
	}
	pc.caller.mu.Lock()
	delete(pc.caller.calls, pc.iid)
	pc.caller.mu.Unlock()
	out := &protocol.Message{Type: protocol.TypeInvocationResult, InvocationID: pc.callerID, FunctionID: pc.fn}
	if perr != nil {
		out.Error = perr
	} else {
		out.Result = resultField(res)
	}
	_ = pc.caller.send(out)
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

// forward sends an invocation to the worker serving it and waits for its result.
func (e *Engine) forward(ctx context.Context, target *conn, id string, data, meta json.RawMessage, tc traceCtx, timeout time.Duration, void bool) (json.RawMessage, *protocol.Error) {
	if void {
		_, perr := e.startForward(target, id, data, meta, tc, timeout, nil)
		return nil, perr
	}
	pc := &pendingCall{ch: make(chan outcome, 1)}
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
	e.mu.RLock()
	_, isBuiltin := e.builtins[m.FunctionID]
	f := e.funcs[fkey{ns, m.FunctionID}].pick()
	e.mu.RUnlock()
	if isBuiltin || f == nil {
		return false
	}
	if !e.mayCall(c, f) {
		c.sendResult(m, nil, forbidden(c, ns, m.FunctionID, f))
		return true
	}
	data := m.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	timeout := e.callTimeout(m.TimeoutMS)
	tp, end := e.startCall(c.caller(), ns, m.FunctionID, m.Traceparent, m.Baggage, f)
	tc := traceCtx{tp, m.Baggage}
	if f.http != nil {
		e.callHTTPAsync(c, m, f.http, data, timeout, end)
		return true
	}
	if m.IsVoid() {
		_, perr := e.startForward(f.conn, m.FunctionID, data, m.Metadata, tc, timeout, nil)
		end(perr)
		return true
	}
	pc := &pendingCall{caller: c, callerID: m.InvocationID, end: end}
	if _, perr := e.startForward(f.conn, m.FunctionID, data, m.Metadata, tc, timeout, pc); perr != nil {
		pc.fn = m.FunctionID
		pc.deliver(nil, perr)
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
			e.chans.expire(now)
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
					pc.deliver(nil, protocol.NewError(errcode.Timeout, "function %s did not answer within %dms", pc.fn, pc.timeout.Milliseconds()))
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
