package core

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/httpfn"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// registerTimeout bounds the DNS lookup of an HTTP-invoked function's host at registration.
const registerTimeout = 5 * time.Second

// registerHTTP checks the invocation of a registerfunction by c (package httpfn). The function
// stays owned by the registering connection: listed as its worker's, gone when it disconnects.
// A session of a gated listener may not register one that carries a secret: whoever registers
// it can call it, and so would have the engine's secret act for it at the granted host.
func (e *Engine) registerHTTP(c *conn, id string, raw json.RawMessage) (*httpfn.Function, error) {
	ctx, cancel := context.WithTimeout(context.Background(), registerTimeout)
	defer cancel()
	f, err := e.opts.HTTP.Register(ctx, id, raw)
	if err == nil && f.Authenticated() && c.session != nil {
		return nil, errcode.New(errcode.Forbidden,
			"function '%s': a session of listener '%s' may not register an HTTP-invoked function with auth; the engine's secrets act only for workers of an ungated listener", id, c.l.Name)
	}
	return f, err
}

// callHTTP calls an HTTP-invoked function; timeout (the call's) bounds it besides the
// invocation's own timeout_ms.
func (e *Engine) callHTTP(ctx context.Context, f *httpfn.Function, data json.RawMessage, timeout time.Duration) (json.RawMessage, *protocol.Error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, perr := e.opts.HTTP.Call(ctx, f, e.newID(), bytes.Clone(data))
	if perr != nil && ctx.Err() == context.DeadlineExceeded && timeout < f.Timeout {
		return nil, protocol.NewError(errcode.Timeout, "function %s did not answer within %dms", f.ID, timeout.Milliseconds())
	}
	return res, perr
}

// callHTTPAsync serves a worker's invocation m of an HTTP-invoked function on a goroutine of its
// own and answers c; the call counts against Options.MaxInflight and ends when c disconnects.
func (e *Engine) callHTTPAsync(c *conn, m *protocol.Message, f *httpfn.Function, data json.RawMessage, timeout time.Duration, end func(*protocol.Error), w *watch) {
	// m is recycled when this returns: keep copies of what the answer needs.
	reply := &protocol.Message{Type: m.Type, InvocationID: strings.Clone(m.InvocationID), FunctionID: strings.Clone(m.FunctionID)}
	if m.IsVoid() {
		reply.Action = &protocol.Action{Type: "void"}
	}
	if n := c.inflight.Add(1); int(n) > e.opts.MaxInflight {
		c.inflight.Add(-1)
		perr := protocol.NewError(errcode.TooManyCalls,
			"this connection already has %d engine-served calls in flight; wait for some to finish", e.opts.MaxInflight)
		end(perr)
		c.sendResult(reply, nil, perr)
		return
	}
	data = bytes.Clone(data)
	go func() {
		defer c.inflight.Add(-1)
		res, perr := e.callHTTP(c.ctx, f, data, timeout)
		end(perr)
		e.fire(w, res, perr)
		c.sendResult(reply, res, perr)
	}()
}
