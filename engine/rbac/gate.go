package rbac

import (
	"encoding/json"
	"slices"

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
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

// GateRegistration applies session s and c's hooks to registration m (called through hook): the
// session's allow_* rights and allowed_trigger_types, the on_*_registration hooks (c nil: none)
// and the function_registration_prefix. An admitted registration is rewritten in place as the
// hook answered and prefixed; a refused one is left as it came and described by the Refusal.
func (c *Config) GateRegistration(s *Session, m *protocol.Message, hook HookFunc) *Refusal {
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
		m.ID, m.Description, m.Metadata = s.Prefixed(reg.FunctionID), reg.Description, reg.Metadata
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
		m.ID, m.TriggerType, m.FunctionID, m.Config = reg.TriggerID, reg.TriggerType, s.Prefixed(reg.FunctionID), reg.Config
	}
	return nil
}

// Rejection is the frame that answers refused registration m of namespace ns on where: a
// registrationrejected FORBIDDEN for a function, the triggerregistrationresult for a trigger, and
// nil (no answer, as iii) for a trigger type.
func Rejection(m *protocol.Message, ns, where string) *protocol.Message {
	switch m.Type {
	case protocol.TypeRegisterFunction:
		return &protocol.Message{Type: protocol.TypeRegistrationRejected, Code: errcode.Forbidden, Namespace: &ns, FunctionID: m.ID, OwnerWorkerID: "engine"}
	case protocol.TypeRegisterTrigger:
		return &protocol.Message{Type: protocol.TypeTriggerRegistrationResult, ID: m.ID, TriggerType: m.TriggerType, FunctionID: m.FunctionID,
			Error: protocol.NewError(errcode.Forbidden, "trigger %s refused by %s", m.ID, where)}
	}
	return nil
}
