package core

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/triggers"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Engine functions of the trigger registry, named as iii's engine names them.
const (
	FnListTriggerTypes = "engine::triggers::list"
	FnListTriggers     = "engine::registered-triggers::list"
)

// A conn is a triggers.Peer.
var _ triggers.Peer = (*conn)(nil)

// ID is the connection's worker id.
func (c *conn) ID() string { return c.id }

// WorkerName is the name the worker registered with.
func (c *conn) WorkerName() string { return c.name() }

// Send queues m for the worker.
func (c *conn) Send(m *protocol.Message) error { return c.send(m) }

// initTriggers adds the trigger registry and its engine functions.
func (e *Engine) initTriggers() {
	e.triggers = triggers.New(e.log)
	e.HandleInline(FnListTriggerTypes, "List trigger types and the workers that provide them", e.listTriggerTypes)
	e.HandleInline(FnListTriggers, "List active triggers (optional {trigger_type, function_id, worker, search, include_internal, include_pending, include_refused})", e.listTriggers)
}

// listTriggerTypes answers engine::triggers::list: every trigger type, but to a session of a
// gated listener only those it may register triggers of.
func (e *Engine) listTriggerTypes(_ context.Context, c Caller, _ json.RawMessage) (any, error) {
	types := e.triggers.Types()
	if c.conn != nil && c.conn.session != nil {
		out := types[:0]
		for _, t := range types {
			if c.conn.session.MayUseTriggerType(t.ID) {
				out = append(out, t)
			}
		}
		types = out
	}
	return map[string]any{"triggers": types}, nil
}

// listTriggers answers engine::registered-triggers::list as iii does: the active triggers, each
// with worker_name the owner of its function; include_pending and include_refused add the
// others, with their status (and error). A session of a gated listener sees only the triggers
// of functions it may call.
func (e *Engine) listTriggers(_ context.Context, c Caller, payload json.RawMessage) (any, error) {
	var in struct {
		triggers.Filter
		Worker          string `json:"worker"`           // worker_name of the rows, as iii's filter
		Search          string `json:"search"`           // case-insensitive, in id, trigger_type or function_id
		IncludeInternal bool   `json:"include_internal"` // also triggers of engine::* functions
	}
	if len(payload) > 0 && string(payload) != "null" {
		if err := json.Unmarshal(payload, &in); err != nil {
			return nil, protocol.NewError(errcode.InvalidArguments,
				"%s takes {trigger_type?, function_id?, worker?, search?, include_internal?, include_pending?, include_refused?}: %v", FnListTriggers, err)
		}
	}
	rows := e.triggers.Triggers(in.Filter)
	out := rows[:0]
	for _, r := range rows {
		r.WorkerName = e.functionOwner(r.Namespace, r.FunctionID)
		needle := strings.ToLower(in.Search)
		if !e.visible(c.conn, r.Namespace, r.FunctionID) || in.Worker != "" && in.Worker != r.WorkerName || !in.IncludeInternal && strings.HasPrefix(r.FunctionID, "engine::") ||
			needle != "" && !strings.Contains(strings.ToLower(r.ID+"\x00"+r.TriggerType+"\x00"+r.FunctionID), needle) {
			continue
		}
		out = append(out, r)
	}
	return map[string]any{"registered_triggers": out}, nil
}

// functionOwner is the name of the worker serving function id in ns, as iii's
// registered-triggers rows name it: the first "::" segment of the id when no worker serves it
// (an engine function, or one not registered yet).
func (e *Engine) functionOwner(ns, id string) string {
	e.mu.RLock()
	f := e.funcs[fkey{ns, id}]
	e.mu.RUnlock()
	if f != nil {
		if name := f.conn.name(); name != "" {
			return name
		}
	}
	first, _, _ := strings.Cut(id, "::")
	return first
}

// isTriggerRegistration reports whether m is a trigger frame that waits, like a function
// registration, for the worker's namespace.
func isTriggerRegistration(m *protocol.Message) bool {
	switch m.Type {
	case protocol.TypeRegisterTriggerType, protocol.TypeUnregisterTriggerType, protocol.TypeRegisterTrigger, protocol.TypeUnregisterTrigger:
		return true
	}
	return false
}

// handleEventFrame handles the frames of the trigger registry that need no namespace (results
// from providers) and the 0.26 observe frames; it reports false for any other frame.
func (e *Engine) handleEventFrame(c *conn, m *protocol.Message) bool {
	switch m.Type {
	case protocol.TypeTriggerRegistrationResult:
		e.triggers.Handle(c, c.nsOrDefaultLocked(), m)
	case protocol.TypeObserve, protocol.TypeUnobserve:
		e.log.Info("observe frame answered UNSUPPORTED", "worker_id", c.id, "frame", m.Type, "id", m.ID)
		_ = c.send(triggers.Unsupported(m))
	default:
		return false
	}
	return true
}

func (c *conn) nsOrDefaultLocked() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nsOrDefault()
}

// Gated reports whether the connection holds a session of a gated listener (triggers.Gated):
// it may not take a trigger type over from a connection without one.
func (c *conn) Gated() bool { return c.session != nil }

// visible reports whether c may see function id of ns in a listing (mayList), with the
// function's registered metadata; e.mu must not be held.
func (e *Engine) visible(c *conn, ns, id string) bool {
	if c == nil || c.session == nil {
		return true
	}
	var meta json.RawMessage
	e.mu.RLock()
	if f := e.funcs[fkey{ns, id}]; f != nil {
		meta = f.frame.Metadata
	}
	e.mu.RUnlock()
	return e.mayList(c, id, ns, meta)
}
