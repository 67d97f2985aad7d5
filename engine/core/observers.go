package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/observe"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// The engine functions of the observe model (package observe).
const (
	FnObserversAdd    = "engine::observers::add"
	FnObserversRemove = "engine::observers::remove"
	FnObserversList   = "engine::observers::list"
)

func (e *Engine) initObservers() {
	e.observers = observe.NewRegistry(observe.Limits{})
	e.HandleInline(FnObserversAdd, "Observe a function: {source: {function_id, namespace?, filters?, capture?, deliver?, on?}, target, options?: {id?, max_fires?, expires_in_ms?, max_in_flight?, timeout_ms?, metadata?}} -> {id, status}", e.addObserver)
	e.HandleInline(FnObserversRemove, "Remove an observer this connection added: {id} -> {removed}", e.removeObserver)
	e.HandleInline(FnObserversList, "List observers (optional {function_id, namespace})", e.listObservers)
}

// sourceNamespace is the namespace an observer's source or target resolves in when the request
// names none: the caller's, except for engine::* and configuration::*, which live in default.
func sourceNamespace(c Caller, fn string) string {
	if c.Namespace == "" || strings.HasPrefix(fn, "engine::") || strings.HasPrefix(fn, "configuration::") {
		return protocol.DefaultNamespace
	}
	return c.Namespace
}

func (e *Engine) addObserver(_ context.Context, c Caller, payload json.RawMessage) (any, error) {
	if c.conn == nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "an observer belongs to the worker connection that adds it; the engine's own calls cannot add one")
	}
	var req observe.Request
	d := json.NewDecoder(bytes.NewReader(payload))
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s: %v", FnObserversAdd, err)
	}
	o, err := observe.New(req, newUUID(), sourceNamespace(c, req.Source.FunctionID), sourceNamespace(c, req.Target.FunctionID), time.Now())
	if err != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s: %v", FnObserversAdd, err)
	}
	o.Owner = c.WorkerID
	o.Restricted = c.conn.session != nil
	if perr := e.observeDenial(c.conn, o.Namespace, o.Function); perr != nil {
		return nil, perr
	}
	if perr := e.observeDenial(c.conn, o.Target.Namespace, o.Target.FunctionID); perr != nil {
		return nil, perr
	}
	replaced, err := e.observers.Add(o)
	switch lim := e.observers.Limits(); {
	case errors.Is(err, observe.ErrIDTaken):
		return nil, protocol.NewError(errcode.InvalidID, "observer id '%s' is held by another connection's observer", o.ID)
	case errors.Is(err, observe.ErrOwnerLimit):
		return nil, protocol.NewError(errcode.ObserverLimit, "%s: worker %s already holds %d observers, the most one connection may; remove some first", FnObserversAdd, c.WorkerID, lim.PerOwner)
	case errors.Is(err, observe.ErrTotalLimit):
		return nil, protocol.NewError(errcode.ObserverLimit, "%s: the engine already holds %d observers, its limit; remove some first", FnObserversAdd, lim.Total)
	case errors.Is(err, observe.ErrRestrictedLimit):
		return nil, protocol.NewError(errcode.ObserverLimit, "%s: sessions of gated listeners already hold %d observers, the most they may together (the rest is kept for trusted workers)", FnObserversAdd, lim.Restricted)
	}
	e.log.Debug("observer added", "id", o.ID, "worker_id", c.WorkerID, "source", o.Function, "namespace", o.Namespace, "target", o.Target.FunctionID)
	return map[string]any{"id": o.ID, "status": e.observerStatus(o), "replaced": replaced}, nil
}

// observeDenial is why c may not observe or target fn in ns, nil when it may: a function that
// is registered and that c may not call (a protected function, or one its listener's RBAC
// hides) cannot be observed or be a target. One that is not registered yet is checked again
// each time the observer fires.
func (e *Engine) observeDenial(c *conn, ns, fn string) *protocol.Error {
	e.mu.RLock()
	f := e.funcs[fkey{ns, fn}]
	e.mu.RUnlock()
	if f != nil && !e.mayCall(c, f) {
		return forbidden(c, ns, fn, f)
	}
	if c.session != nil {
		var meta json.RawMessage
		if f != nil {
			meta = f.frame.Metadata
		}
		if why := c.l.RBAC.Denial(c.session, fn, ns, meta); why != "" {
			return protocol.NewError(errcode.Forbidden, "function '%s' in namespace '%s' cannot be observed or targeted from listener %s: %s", fn, ns, c.l.Name, why)
		}
	}
	return nil
}

func (e *Engine) removeObserver(_ context.Context, c Caller, payload json.RawMessage) (any, error) {
	var req struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(payload, &req); err != nil || req.ID == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {id}", FnObserversRemove)
	}
	o := e.observers.Get(req.ID)
	if o == nil {
		return nil, protocol.NewError(errcode.NotFound, "no observer '%s'", req.ID)
	}
	if o.Owner != c.WorkerID {
		return nil, protocol.NewError(errcode.Forbidden, "observer '%s' belongs to worker %s; only the connection that added it may remove it", req.ID, o.Owner)
	}
	return map[string]any{"removed": e.observers.Remove(o)}, nil
}

// listObservers answers engine::observers::list. A session of a gated listener sees only the
// observers its own connection added: another's show what it watches, its filters and metadata.
func (e *Engine) listObservers(_ context.Context, c Caller, payload json.RawMessage) (any, error) {
	var req struct {
		FunctionID string `json:"function_id"`
		Namespace  string `json:"namespace"`
	}
	if len(payload) > 0 && string(payload) != "null" {
		if err := json.Unmarshal(payload, &req); err != nil {
			return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {function_id?, namespace?}: %v", FnObserversList, err)
		}
	}
	rows := []observe.Row{}
	gated := c.conn != nil && c.conn.session != nil
	for _, o := range e.observers.List() {
		if gated && o.Owner != c.WorkerID {
			continue
		}
		if (req.FunctionID == "" || o.Function == req.FunctionID) && (req.Namespace == "" || o.Namespace == req.Namespace) {
			name := ""
			e.mu.RLock()
			if owner := e.conns[o.Owner]; owner != nil {
				name = owner.name()
			}
			e.mu.RUnlock()
			rows = append(rows, o.Row(e.observerStatus(o), name))
		}
	}
	return map[string]any{"observers": rows}, nil
}

// observerStatus is "active" when o's target is registered, otherwise "pending".
func (e *Engine) observerStatus(o *observe.Observer) string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	_, builtin := e.builtins[o.Target.FunctionID]
	if builtin || e.funcs[fkey{o.Target.Namespace, o.Target.FunctionID}] != nil {
		return "active"
	}
	return "pending"
}

// watch is what the engine keeps of a call whose function has observers, until the call ends:
// copies of its input, metadata and caller.
type watch struct {
	observers []*observe.Observer
	call      observe.Call
	tc        traceCtx
}

// watchCall is the watch of a call of id in ns, nil when the function has no observer (which
// costs one atomic load).
func (e *Engine) watchCall(c Caller, ns, id string, data, meta json.RawMessage, tc traceCtx) *watch {
	obs := e.observers.Of(ns, id)
	if obs == nil {
		return nil
	}
	return &watch{observers: obs, tc: traceCtx{strings.Clone(tc.traceparent), strings.Clone(tc.baggage)},
		call: observe.Call{FunctionID: strings.Clone(id), Namespace: strings.Clone(ns), Input: bytes.Clone(data), Metadata: bytes.Clone(meta),
			Caller: observe.Caller{WorkerID: c.WorkerID, WorkerName: c.Name, Namespace: c.Namespace}}}
}

// fire runs the targets of the observers the call of w fired, given its outcome; res need only
// stay valid until fire returns.
func (e *Engine) fire(w *watch, res json.RawMessage, perr *protocol.Error) {
	if w == nil {
		return
	}
	call := w.call
	if perr != nil {
		call.Error, _ = json.Marshal(map[string]string{"code": perr.Code, "message": perr.Message})
	} else {
		call.Output = res
	}
	allow := func(o *observe.Observer) bool { return e.mayFire(o, call.Caller.WorkerID) }
	for _, d := range e.observers.Match(w.observers, call, time.Now(), allow) {
		go e.runTarget(d, w.tc)
	}
}

// mayFire reports whether o may fire now for a call made by worker callerID: its owner is
// connected and may still call its source and its target, and the target is registered. An
// owner that is a session of a gated listener observes only its own calls: another caller's
// input and output are not its to see, even of a function it may call.
func (e *Engine) mayFire(o *observe.Observer, callerID string) bool {
	e.mu.RLock()
	owner := e.conns[o.Owner]
	e.mu.RUnlock()
	if owner != nil && owner.session != nil && callerID != o.Owner {
		return false
	}
	return owner != nil && e.observeDenial(owner, o.Namespace, o.Function) == nil &&
		e.observeDenial(owner, o.Target.Namespace, o.Target.FunctionID) == nil && e.observerStatus(o) == "active"
}

// runTarget calls d's target on behalf of the observer's owner, with the owner's rights, and
// records the outcome.
func (e *Engine) runTarget(d observe.Delivery, tc traceCtx) {
	o := d.Observer
	e.mu.RLock()
	owner := e.conns[o.Owner]
	e.mu.RUnlock()
	if owner == nil {
		d.Done(true)
		return
	}
	timeout := min(o.Timeout(), e.opts.MaxCallTimeout)
	_, perr := e.dispatch(owner.ctx, owner.caller(), o.Target.Namespace, o.Target.FunctionID, d.Payload(), nil, tc, timeout, false)
	d.Done(perr != nil)
	if perr != nil {
		e.log.Debug("observer target failed", "id", o.ID, "target", o.Target.FunctionID, "code", perr.Code, "message", perr.Message)
	}
}
