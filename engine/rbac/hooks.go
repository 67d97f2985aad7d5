package rbac

import (
	"encoding/json"
	"strings"
)

// FunctionReg is a function registration as the on_function_registration hook sees and may
// rewrite it (iii's OnFunctionRegistrationInput / Result).
type FunctionReg struct {
	FunctionID  string          `json:"function_id"`
	Description string          `json:"description,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// TriggerReg is a trigger registration for the on_trigger_registration hook.
type TriggerReg struct {
	TriggerID   string          `json:"trigger_id"`
	TriggerType string          `json:"trigger_type"`
	FunctionID  string          `json:"function_id"`
	Config      json.RawMessage `json:"config,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// TriggerTypeReg is a trigger type registration for the on_trigger_type_registration hook.
type TriggerTypeReg struct {
	TriggerTypeID string `json:"trigger_type_id"`
	Description   string `json:"description"`
}

// HookInput is the payload a hook is called with: the registration's fields plus the
// session's context.
func HookInput(reg any, ctx json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	b, _ := json.Marshal(reg) // the registration types marshal to objects
	_ = json.Unmarshal(b, &fields)
	if len(ctx) == 0 {
		ctx = json.RawMessage("{}")
	}
	fields["context"] = ctx
	out, _ := json.Marshal(fields)
	return out
}

// ApplyHook reads a hook's answer into reg, as iii does: an object admits the registration, each
// string (or, for metadata and config, any) field it sets replacing the registration's ({}
// admits it unchanged); anything else (false, true, null, no result) refuses it, as does a
// hook that fails, which the caller never passes here. It reports whether the registration is
// admitted.
func ApplyHook(res json.RawMessage, reg any) bool {
	if !strings.HasPrefix(strings.TrimSpace(string(res)), "{") {
		return false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(res, &fields) != nil {
		return false
	}
	str := func(key string, dst *string) {
		var s string
		if raw, ok := fields[key]; ok && json.Unmarshal(raw, &s) == nil && s != "" {
			*dst = s
		}
	}
	raw := func(key string, dst *json.RawMessage) {
		if v, ok := fields[key]; ok && string(v) != "null" {
			*dst = v
		}
	}
	switch r := reg.(type) {
	case *FunctionReg:
		str("function_id", &r.FunctionID)
		str("description", &r.Description)
		raw("metadata", &r.Metadata)
	case *TriggerReg:
		str("trigger_id", &r.TriggerID)
		str("trigger_type", &r.TriggerType)
		str("function_id", &r.FunctionID)
		raw("config", &r.Config)
	case *TriggerTypeReg:
		str("trigger_type_id", &r.TriggerTypeID)
		str("description", &r.Description)
	}
	return true
}

// MiddlewareInput is what a listener's middleware_function_id is called with instead of the
// function a session invoked; the middleware decides whether to call it and what to answer.
type MiddlewareInput struct {
	FunctionID string          `json:"function_id"`
	Payload    json.RawMessage `json:"payload"`
	Action     json.RawMessage `json:"action,omitempty"`
	Context    json.RawMessage `json:"context"`
	Namespace  string          `json:"namespace"`
}
