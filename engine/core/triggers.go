package core

import (
	"context"
	"encoding/json"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/triggers"
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
	e.HandleInline(FnListTriggerTypes, "List trigger types and the workers that provide them", func(context.Context, Caller, json.RawMessage) (any, error) {
		return map[string]any{"triggers": e.triggers.Types()}, nil
	})
	e.HandleInline(FnListTriggers, "List registered triggers (optional {trigger_type, function_id})", func(_ context.Context, _ Caller, payload json.RawMessage) (any, error) {
		var f triggers.Filter
		_ = json.Unmarshal(payload, &f)
		return map[string]any{"registered_triggers": e.triggers.Triggers(f)}, nil
	})
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
