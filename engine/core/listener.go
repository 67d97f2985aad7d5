package core

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/internal/wire"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/engine/triggers"
	"github.com/iii-go/iii/internal/base/errcode"
)

// AuthError is the code of the error frame a connection refused by its listener's auth
// function gets before the engine closes it: iii's {"type":"error","error":{"code","message"}}.
const AuthError = errcode.AuthError

// Listener is one worker listener (a config.yaml iii-worker-manager entry): its own Origin
// rules and handshake deadline and, as iii defines them, a middleware and an rbac: gate.
type Listener struct {
	Name             string   // for logs: the config entry's name
	AllowedOrigins   []string // browser origins admitted besides same-origin
	HandshakeTimeout time.Duration
	// Middleware, when set, is called with rbac.MiddlewareInput instead of every function that
	// is not the engine's which a connection of this listener invokes; its answer is the call's.
	Middleware string
	// RBAC, when set, gates every connection of this listener (package rbac). The auth
	// function, the registration hooks and the middleware are called by the engine itself, in
	// the default namespace, within HandshakeTimeout (auth and hooks), and served only by
	// connections without a session (reserveGateFunctions).
	RBAC *rbac.Config
}

// Bound is a listener and the socket it accepts on.
type Bound struct {
	Listener
	Net net.Listener
}

// listener is a Listener being served.
type listener struct {
	Listener
	loopback bool // on a loopback address: Host must be a loopback name
}

// gated reports whether the listener's connections have sessions: it has a middleware or rbac.
func (l *listener) gated() bool { return l.RBAC != nil || l.Middleware != "" }

// mainListener is the Listener of Options: the one Serve serves.
func (e *Engine) mainListener() Listener {
	return Listener{Name: "iii-worker-manager", AllowedOrigins: e.opts.AllowedOrigins, HandshakeTimeout: e.opts.HandshakeTimeout}
}

// authenticate opens the session of a connection to a gated listener: Open rights without an
// auth function, else what the auth function answers for the upgrade request r. Fail closed: a
// missing auth function, an error, no answer within the handshake deadline or an answer that is
// not an AuthResult refuse the connection.
func (e *Engine) authenticate(l *listener, r *http.Request) (*rbac.Session, *protocol.Error) {
	if l.RBAC == nil || l.RBAC.AuthFunctionID == "" {
		s := rbac.Open()
		s.IP = rbac.PeerIP(r)
		return s, nil
	}
	in, _ := json.Marshal(rbac.NewAuthInput(r))
	res, perr := e.invokeGate(context.Background(), l.RBAC.AuthFunctionID, in, l.HandshakeTimeout)
	if perr != nil {
		return nil, protocol.NewError(AuthError, "auth function %s refused the connection: %s: %s", l.RBAC.AuthFunctionID, perr.Code, perr.Message)
	}
	s, err := rbac.ParseAuthResult(res)
	if err != nil {
		return nil, protocol.NewError(AuthError, "%v", err)
	}
	s.IP = rbac.PeerIP(r)
	return s, nil
}

// refuseSession sends a refused connection iii's error frame and closes it.
func (e *Engine) refuseSession(l *listener, r *http.Request, ws *batchconn.Conn, perr *protocol.Error) {
	e.log.Warn("connection refused by the listener's auth", "listener", l.Name, "code", perr.Code, "ip", rbac.PeerIP(r), "reason", perr.Message)
	frame, _ := json.Marshal(map[string]any{"type": "error", "error": perr})
	_ = ws.WriteText([][]byte{frame}, false)
	_ = ws.CloseStatus(batchconn.StatusPolicyViolation, AuthError, time.Second)
	_ = ws.Close()
}

// gateInvoke applies c's session to invocation m: a call the session may not make is answered
// FORBIDDEN, and one the listener's middleware takes goes to it. It reports whether it handled
// m; m is borrowed and only read unless the middleware takes it.
func (e *Engine) gateInvoke(c *conn, m *protocol.Message) bool {
	ns, perr := requestNamespace(m.Namespace)
	if perr != nil {
		return false // answered INVALID_NAMESPACE by the normal path
	}
	e.mu.RLock()
	_, isBuiltin := e.builtins[m.FunctionID]
	var meta json.RawMessage
	if f := e.funcs[fkey{ns, m.FunctionID}]; f != nil {
		meta = f.frame.Metadata
	}
	e.mu.RUnlock()
	if why := c.l.RBAC.Denial(c.session, m.FunctionID, ns, meta); why != "" {
		c.sendResult(m, nil, rbac.Forbidden("listener "+c.l.Name, m.FunctionID, ns, why))
		return true
	}
	if c.l.Middleware == "" || isBuiltin {
		return false
	}
	wire.Own(m)
	if n := c.inflight.Add(1); int(n) > e.opts.MaxInflight {
		c.inflight.Add(-1)
		c.sendResult(m, nil, protocol.NewError(errcode.TooManyCalls,
			"this connection already has %d engine-served calls in flight; wait for some to finish", e.opts.MaxInflight))
		return true
	}
	go func() {
		defer c.inflight.Add(-1)
		var action json.RawMessage
		if m.Action != nil {
			action, _ = json.Marshal(m.Action)
		}
		data := m.Data
		if len(data) == 0 {
			data = json.RawMessage("null")
		}
		in, _ := json.Marshal(rbac.MiddlewareInput{FunctionID: m.FunctionID, Payload: data, Action: action, Context: c.session.Context, Namespace: ns})
		if perr := e.gateServedBySession(c.l.Middleware); perr != nil {
			e.log.Warn("call refused: the middleware is not served by a trusted connection", "listener", c.l.Name, "middleware", c.l.Middleware, "code", perr.Code)
			c.sendResult(m, nil, perr)
			return
		}
		res, perr := e.dispatch(c.ctx, Caller{WorkerID: "engine", Namespace: protocol.DefaultNamespace}, protocol.DefaultNamespace, c.l.Middleware, in, nil,
			traceCtx{traceparent: m.Traceparent, baggage: m.Baggage}, e.callTimeout(m.TimeoutMS), m.IsVoid())
		c.sendResult(m, res, perr)
	}()
	return true
}

// gateRegistration applies c's session to registration m (owned; it may rewrite it): the
// session's allow_* rights, the listener's hooks and the function_registration_prefix
// (rbac.Config.GateRegistration). It reports whether the registration goes on; a refused one
// has been answered.
func (e *Engine) gateRegistration(c *conn, ns string, m *protocol.Message) bool {
	hook := func(id string, in json.RawMessage) (json.RawMessage, error) {
		res, perr := e.invokeGate(c.ctx, id, in, c.l.HandshakeTimeout)
		if perr != nil {
			e.log.Warn("registration refused: the hook failed", "listener", c.l.Name, "hook", id, "worker_id", c.id, "code", perr.Code, "reason", perr.Message)
			return nil, perr
		}
		return res, nil
	}
	bind := func(id string) string { return e.bindDenial(c, ns, id) }
	r := c.l.RBAC.GateRegistration(c.session, m, hook, bind)
	if r == nil && m.Type == protocol.TypeRegisterFunction {
		e.mu.RLock()
		by, isGate := e.gateFns[m.ID]
		e.mu.RUnlock()
		if isGate {
			r = &rbac.Refusal{What: m.ID, Why: "listener " + by + " calls it to enforce its gate; only a connection without a session (a trusted listener) may serve it"}
		}
	}
	if r == nil {
		return true
	}
	e.log.Warn("registration refused", "listener", c.l.Name, "what", r.What, "namespace", ns, "worker_id", c.id, "reason", r.Why)
	if f := rbac.Rejection(m, ns, "listener "+c.l.Name, r); f != nil {
		_ = c.send(f)
	}
	return false
}

// mayList reports whether caller sees function id of ns in engine::functions::list: every
// function, but on a gated listener only those its session may call.
func (e *Engine) mayList(caller *conn, id, ns string, meta json.RawMessage) bool {
	if caller == nil || caller.session == nil {
		return true
	}
	return caller.l.RBAC.Allowed(caller.session, id, ns, meta)
}

// reserveGateFunctions records the function ids every listener's gate names (its rbac: auth
// function and hooks, its middleware_function_id): a connection with a session may not
// register them (gateRegistration), and the engine calls them only when no such connection
// serves them (invokeGate), so no session can squat the function that decides its rights,
// whether or not the trusted worker is connected.
func (e *Engine) reserveGateFunctions(bound []Bound) {
	ids := map[string]string{}
	for _, b := range bound {
		for _, id := range b.RBAC.GateFunctions() {
			ids[id] = b.Name
		}
		if b.Middleware != "" {
			ids[b.Middleware] = b.Name
		}
	}
	e.mu.Lock()
	e.gateFns = ids
	e.mu.Unlock()
}

// gateServedBySession is FORBIDDEN when function id of the default namespace, which a gate
// calls, is served by a connection with a session (it never should be: such registrations are
// refused), else nil.
func (e *Engine) gateServedBySession(id string) *protocol.Error {
	e.mu.RLock()
	f := e.funcs[fkey{protocol.DefaultNamespace, id}]
	gated := false
	if f != nil {
		f.instances(func(o *fnEntry) { gated = gated || o.conn.session != nil })
	}
	e.mu.RUnlock()
	if gated {
		return protocol.NewError(errcode.Forbidden, "function '%s' enforces a listener's gate and is served by a connection of a gated listener; the engine calls it only on a connection without a session", id)
	}
	return nil
}

// invokeGate calls id, an auth function or a registration hook, in the default namespace on
// behalf of the engine, unless a connection with a session serves it (gateServedBySession).
func (e *Engine) invokeGate(ctx context.Context, id string, in json.RawMessage, timeout time.Duration) (json.RawMessage, *protocol.Error) {
	if perr := e.gateServedBySession(id); perr != nil {
		return nil, perr
	}
	return e.Invoke(ctx, protocol.DefaultNamespace, id, in, timeout)
}

// bindDenial is why c's session may not bind a trigger to function id of ns (rbac.BindFunc):
// "" for a function c serves itself or one the session may call, judged on the function's
// registered metadata.
func (e *Engine) bindDenial(c *conn, ns, id string) string {
	e.mu.RLock()
	f := e.funcs[fkey{ns, id}]
	var meta json.RawMessage
	own := false
	if f != nil {
		meta = f.frame.Metadata
		f.instances(func(o *fnEntry) { own = own || o.conn == c })
	}
	e.mu.RUnlock()
	if own {
		return ""
	}
	return c.l.RBAC.Denial(c.session, id, ns, meta)
}

// recheckTriggers revokes the triggers of sessions that may no longer bind their function, or a
// function their config names, after the engine's functions changed: another worker now serves
// an id the session served itself, or the metadata that exposed a function changed. The
// provider drops the trigger (unless a twin of another worker keeps it) and the session gets a
// triggerregistrationresult FORBIDDEN, so a provider never calls, with its own rights, what the
// session could not call. A function no one serves is left alone: a call of it fails, and
// whoever registers it next is judged then.
func (e *Engine) recheckTriggers() {
	e.mu.RLock()
	gated := map[string]*conn{}
	for id, c := range e.conns {
		if c.session != nil {
			gated[id] = c
		}
	}
	e.mu.RUnlock()
	if len(gated) == 0 {
		return
	}
	for _, t := range e.triggers.Triggers(triggers.Filter{IncludeRefused: true}) {
		c := gated[t.WorkerID]
		if c == nil {
			continue
		}
		named, _ := rbac.ConfigFunctionIDs(t.Config)
		for _, id := range append([]string{t.FunctionID}, named...) {
			e.mu.RLock()
			_, builtin := e.builtins[id]
			served := builtin || e.funcs[fkey{t.Namespace, id}] != nil
			e.mu.RUnlock()
			if !served {
				continue
			}
			why := e.bindDenial(c, t.Namespace, id)
			if why == "" {
				continue
			}
			perr := protocol.NewError(errcode.Forbidden, "trigger %s revoked by listener %s: function %s may no longer be called by this session: %s", t.ID, c.l.Name, id, why)
			if e.triggers.Revoke(c, t.ID, perr) {
				e.log.Warn("trigger revoked", "listener", c.l.Name, "trigger_id", t.ID, "function", id, "namespace", t.Namespace, "worker_id", c.id, "reason", why)
			}
			break
		}
	}
}
