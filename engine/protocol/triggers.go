package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/iii-go/iii/internal/base/errcode"
)

// Trigger is one trigger as its provider sees it: a binding of FunctionID to events of Type,
// configured by Config.
type Trigger struct {
	ID         string
	Type       string
	FunctionID string
	// Namespace is where FunctionID resolves ("" when the engine did not say: the provider's).
	Namespace string
	Config    json.RawMessage
	// Metadata travels with every firing as the invocation's metadata sidecar.
	Metadata json.RawMessage
}

// CallOptions are the options a provider fires t with: its namespace and metadata.
func (t Trigger) CallOptions() []CallOption {
	var opts []CallOption
	if t.Namespace != "" {
		opts = append(opts, InNamespace(t.Namespace))
	}
	if len(t.Metadata) > 0 && string(t.Metadata) != "null" {
		opts = append(opts, WithMetadata(t.Metadata))
	}
	return opts
}

// TriggerHandler is the provider side of a trigger type. RegisterTrigger's error refuses the
// trigger: an *Error keeps its code (INVALID_CRON_EXPRESSION, say), any other error is sent as
// trigger_registration_failed. Both are called on their own goroutine.
type TriggerHandler interface {
	RegisterTrigger(ctx context.Context, t Trigger) error
	UnregisterTrigger(ctx context.Context, t Trigger) error
}

// TriggerTypeOption sets optional fields of a registered trigger type.
type TriggerTypeOption func(*Message)

// WithTriggerRequestFormat sets the JSON Schema of a trigger's config.
func WithTriggerRequestFormat(schema json.RawMessage) TriggerTypeOption {
	return func(m *Message) { m.TriggerRequestFormat = schema }
}

// WithCallRequestFormat sets the JSON Schema of the payload the trigger type fires with.
func WithCallRequestFormat(schema json.RawMessage) TriggerTypeOption {
	return func(m *Message) { m.CallRequestFormat = schema }
}

// TriggerOption sets optional fields of a registered trigger.
type TriggerOption func(*Message)

// TriggerMetadata attaches meta (a JSON object) to the trigger; its provider sends it with
// every firing.
func TriggerMetadata(meta json.RawMessage) TriggerOption {
	return func(m *Message) { m.Metadata = meta }
}

// triggerState is what a Worker holds of trigger types and triggers; guarded by Worker.mu.
type triggerState struct {
	types    map[string]*triggerType
	triggers map[string]*Message // registered by this worker, by id
	order    []string            // trigger ids in registration order (replayed in it)
	errs     map[string]*Error   // the latest refusal of each trigger of this worker
}

type triggerType struct {
	frame   *Message
	handler TriggerHandler
}

func (s *triggerState) init() {
	if s.types == nil {
		s.types, s.triggers, s.errs = map[string]*triggerType{}, map[string]*Message{}, map[string]*Error{}
	}
}

func (s *triggerState) typeFrames() []*Message {
	ids := slices.Sorted(maps.Keys(s.types))
	out := make([]*Message, 0, len(ids))
	for _, id := range ids {
		out = append(out, s.types[id].frame)
	}
	return out
}

func (s *triggerState) triggerFrames() []*Message {
	out := make([]*Message, 0, len(s.order))
	for _, id := range s.order {
		if m := s.triggers[id]; m != nil {
			out = append(out, m)
		}
	}
	return out
}

// send writes m now when connected; otherwise it goes with the next connect's replay.
func (w *Worker) sendRegistration(m *Message) error {
	if c := w.liveConn(); c != nil {
		return w.write(c, m)
	}
	return nil
}

// RegisterTriggerType makes this worker the provider of trigger type id: the engine sends it
// every trigger of that type (h.RegisterTrigger) and every removal (h.UnregisterTrigger). Kept
// and sent again after every reconnect.
func (w *Worker) RegisterTriggerType(id, description string, h TriggerHandler, opts ...TriggerTypeOption) error {
	if id == "" || h == nil {
		return errors.New("register trigger type: id and handler are required")
	}
	m := &Message{Type: TypeRegisterTriggerType, ID: id, Description: description}
	for _, o := range opts {
		o(m)
	}
	w.mu.Lock()
	w.trig.init()
	w.trig.types[id] = &triggerType{frame: m, handler: h}
	w.mu.Unlock()
	return w.sendRegistration(m)
}

// UnregisterTriggerType stops providing id.
func (w *Worker) UnregisterTriggerType(id string) error {
	w.mu.Lock()
	w.trig.init()
	delete(w.trig.types, id)
	w.mu.Unlock()
	return w.sendRegistration(&Message{Type: TypeUnregisterTriggerType, ID: id})
}

// RegisterTrigger binds functionID to events of triggerType, configured by config (any
// JSON-marshalable value), and returns the trigger's id. The engine parks it until a provider
// of the type is connected. A provider's refusal arrives later: see TriggerError.
func (w *Worker) RegisterTrigger(triggerType, functionID string, config any, opts ...TriggerOption) (string, error) {
	if triggerType == "" || functionID == "" {
		return "", errors.New("register trigger: trigger type and function id are required")
	}
	cfg, err := marshalPayload(config)
	if err != nil {
		return "", err
	}
	id := uuid.NewString() // as iii's SDKs make trigger ids
	m := &Message{Type: TypeRegisterTrigger, ID: id, TriggerType: triggerType, FunctionID: functionID, Config: cfg}
	for _, o := range opts {
		o(m)
	}
	w.mu.Lock()
	w.trig.init()
	w.trig.triggers[id] = m
	w.trig.order = append(w.trig.order, id)
	w.mu.Unlock()
	return id, w.sendRegistration(m)
}

// UnregisterTrigger removes a trigger this worker registered.
func (w *Worker) UnregisterTrigger(id string) error {
	w.mu.Lock()
	w.trig.init()
	m := w.trig.triggers[id]
	delete(w.trig.triggers, id)
	delete(w.trig.errs, id)
	w.mu.Unlock()
	if m == nil {
		return nil
	}
	return w.sendRegistration(&Message{Type: TypeUnregisterTrigger, ID: id, TriggerType: m.TriggerType})
}

// TriggerError is the latest refusal of trigger id (by the engine or its provider), nil when
// none came.
func (w *Worker) TriggerError(id string) *Error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.trig.errs[id]
}

func (w *Worker) onTriggerFrame(c *link, m *Message) {
	if m.Type == TypeTriggerRegistrationResult {
		if m.Error != nil {
			w.mu.Lock()
			w.trig.init()
			if w.trig.triggers[m.ID] != nil {
				w.trig.errs[m.ID] = m.Error
			}
			w.mu.Unlock()
			w.cfg.Logger.Warn("trigger refused", "trigger_id", m.ID, "trigger_type", m.TriggerType, "code", m.Error.Code, "message", m.Error.Message)
		}
		return
	}
	w.mu.Lock()
	w.trig.init()
	tt := w.trig.types[m.TriggerType]
	w.mu.Unlock()
	t := Trigger{ID: m.ID, Type: m.TriggerType, FunctionID: m.FunctionID, Namespace: m.NamespaceOr(""), Config: m.Config, Metadata: m.Metadata}
	go func() {
		if m.Type == TypeUnregisterTrigger {
			if tt != nil {
				if err := tt.handler.UnregisterTrigger(w.ctx, t); err != nil {
					w.cfg.Logger.Warn("unregistering a trigger", "trigger_id", m.ID, "err", err)
				}
			}
			return
		}
		res := &Message{Type: TypeTriggerRegistrationResult, ID: m.ID, TriggerType: m.TriggerType, FunctionID: m.FunctionID}
		if tt == nil {
			res.Error = NewError(errcode.TriggerTypeNotFound, "Trigger type not found")
		} else if err := callTriggerHandler(w.ctx, tt.handler, t); err != nil {
			var e *Error
			if errors.As(err, &e) {
				res.Error = e
			} else {
				res.Error = NewError(errcode.TriggerRegistrationFailed, "%s", err.Error())
			}
		}
		if err := w.write(c, res); err != nil {
			w.cfg.Logger.Debug("answering a trigger registration", "err", err)
		}
	}()
}

func callTriggerHandler(ctx context.Context, h TriggerHandler, t Trigger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = NewError(errcode.TriggerRegistrationFailed, "trigger handler panicked: %v", r)
		}
	}()
	return h.RegisterTrigger(ctx, t)
}
