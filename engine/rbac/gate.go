package rbac

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// The gate's decisions on frames, shared by the engine's RBAC listeners (package core) and the
// rbac-proxy worker, so a connection is gated alike whichever of them it goes through.

// Denial is why session s may not call id in ns ("" when Allowed says it may).
func (c *Config) Denial(s *Session, id, ns string, metadata json.RawMessage) string {
	if c.Allowed(s, id, ns, metadata) {
		return ""
	}
	if c == nil || slices.Contains(s.ForbiddenFunctions, id) {
		return "the auth function lists it in forbidden_functions"
	}
	return "it matches none of the listener's rbac.expose_functions and the auth function did not allow it"
}

// Forbidden is the FORBIDDEN answer to a call of id in ns refused on where (e.g. "listener
// public") for reason why (Denial).
func Forbidden(where, id, ns, why string) *protocol.Error {
	return protocol.NewError(errcode.Forbidden, "function '%s' in namespace '%s' is not allowed on %s: %s", id, ns, where, why)
}

// HookFunc calls the registration hook id with input and returns its answer; an error refuses
// the registration.
type HookFunc func(id string, input json.RawMessage) (json.RawMessage, error)

// Refusal is a registration the gate refused: What it was (for the log) and Why.
type Refusal struct{ What, Why string }

// BindFunc is why the session may not have function id (as registered: prefixed) called by a
// trigger's provider, "" when it may: a function it may call (Config.Denial, with the
// function's metadata) or one its own connection serves. A provider calls the functions of a
// trigger with its own rights, so a trigger must never reach what the session could not call.
type BindFunc func(id string) string

// ConfigFunctionIDs are the function ids a trigger's config names for its provider to call:
// the values of its top-level keys function_id, *_function_id (a string, e.g. the http and
// stream triggers' condition_function_id) and *_function_ids (a list of strings, e.g. the http
// trigger's middleware_function_ids), whatever the trigger type, sorted by key. A value of
// another type under such a key (null aside) is an error: the gate could not tell what it names.
func ConfigFunctionIDs(cfg json.RawMessage) ([]string, error) {
	var obj map[string]json.RawMessage
	if len(cfg) == 0 || json.Unmarshal(cfg, &obj) != nil {
		return nil, nil // not an object: it names no function
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ids []string
	for _, k := range keys {
		v := obj[k]
		if string(v) == "null" {
			continue
		}
		switch {
		case k == "function_id" || strings.HasSuffix(k, "_function_id"):
			var id string
			if json.Unmarshal(v, &id) != nil {
				return nil, fmt.Errorf("config key %s must be a function id (a string)", k)
			}
			ids = append(ids, id)
		case strings.HasSuffix(k, "_function_ids"):
			var list []string
			if json.Unmarshal(v, &list) != nil {
				return nil, fmt.Errorf("config key %s must be a list of function ids (strings)", k)
			}
			ids = append(ids, list...)
		}
	}
	return ids, nil
}

// GateRegistration applies session s and c's hooks to registration m (called through hook): the
// session's allow_* rights and allowed_trigger_types, the on_*_registration hooks (c nil: none)
// and the function_registration_prefix; a trigger's function, and the functions its config
// names (ConfigFunctionIDs), must pass bind. An admitted registration is rewritten in place as
// the hook answered and prefixed; a refused one is left as it came and described by the Refusal.
func (c *Config) GateRegistration(s *Session, m *protocol.Message, hook HookFunc, bind BindFunc) *Refusal {
	call := func(id string, reg any) bool {
		if c == nil || id == "" {
			return true
		}
		res, err := hook(id, HookInput(reg, s.Context))
		return err == nil && ApplyHook(res, reg)
	}
	switch m.Type {
	case protocol.TypeRegisterFunction:
		if !s.AllowFunctionRegistration {
			return &Refusal{m.ID, "the auth function did not allow function registration"}
		}
		reg := &FunctionReg{FunctionID: m.ID, Description: m.Description, Metadata: m.Metadata}
		if c != nil && !call(c.OnFunctionRegistration, reg) {
			return &Refusal{m.ID, "on_function_registration_function_id " + c.OnFunctionRegistration + " refused it"}
		}
		id := s.Prefixed(reg.FunctionID)
		if protocol.IsEngineFunction(id) {
			return &Refusal{id, "engine::, configuration:: and sandbox:: ids are served by the engine and by workers outside a gated session only"}
		}
		m.ID, m.Description, m.Metadata = id, reg.Description, reg.Metadata
	case protocol.TypeUnregisterFunction:
		m.ID = s.Prefixed(m.ID)
	case protocol.TypeRegisterTriggerType:
		if !s.AllowTriggerTypeRegistration {
			return &Refusal{"trigger type " + m.ID, "the auth function did not allow trigger type registration"}
		}
		reg := &TriggerTypeReg{TriggerTypeID: m.ID, Description: m.Description}
		if c != nil && !call(c.OnTriggerTypeRegistration, reg) {
			return &Refusal{"trigger type " + m.ID, "on_trigger_type_registration_function_id " + c.OnTriggerTypeRegistration + " refused it"}
		}
		m.ID, m.Description = reg.TriggerTypeID, reg.Description
	case protocol.TypeRegisterTrigger:
		if !s.MayUseTriggerType(m.TriggerType) {
			return &Refusal{"trigger " + m.ID, "its type " + m.TriggerType + " is not in the auth function's allowed_trigger_types"}
		}
		reg := &TriggerReg{TriggerID: m.ID, TriggerType: m.TriggerType, FunctionID: m.FunctionID, Config: m.Config, Metadata: m.Metadata}
		if c != nil && !call(c.OnTriggerRegistration, reg) {
			return &Refusal{"trigger " + m.ID, "on_trigger_registration_function_id " + c.OnTriggerRegistration + " refused it"}
		}
		fn := s.Prefixed(reg.FunctionID)
		named, err := ConfigFunctionIDs(reg.Config)
		if err != nil {
			return &Refusal{"trigger " + m.ID, err.Error()}
		}
		for i, id := range append([]string{fn}, named...) {
			if why := bind(id); why != "" {
				what := "its function_id " + id
				if i > 0 {
					what = "its config names " + id + ", which"
				}
				return &Refusal{"trigger " + m.ID, what + " may not be called by this session: " + why}
			}
		}
		m.ID, m.TriggerType, m.FunctionID, m.Config = reg.TriggerID, reg.TriggerType, fn, reg.Config
	}
	return nil
}

// Rejection is the frame that answers registration m of namespace ns refused on where (r says
// why): a registrationrejected FORBIDDEN for a function, the triggerregistrationresult for a
// trigger, and nil (no answer, as iii) for a trigger type.
func Rejection(m *protocol.Message, ns, where string, r *Refusal) *protocol.Message {
	switch m.Type {
	case protocol.TypeRegisterFunction:
		return &protocol.Message{Type: protocol.TypeRegistrationRejected, Code: errcode.Forbidden, Namespace: &ns, FunctionID: m.ID, OwnerWorkerID: "engine"}
	case protocol.TypeRegisterTrigger:
		return &protocol.Message{Type: protocol.TypeTriggerRegistrationResult, ID: m.ID, TriggerType: m.TriggerType, FunctionID: m.FunctionID,
			Error: protocol.NewError(errcode.Forbidden, "trigger %s refused by %s: %s", m.ID, where, r.Why)}
	}
	return nil
}
