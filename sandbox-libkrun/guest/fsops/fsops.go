// Package fsops implements the ten fs::* operations of the sandbox contract against the local
// filesystem; the guest agent runs it inside the sandbox root.
package fsops

import (
	"encoding/json"
)

// Error is an operation failure with its S21x code.
type Error struct {
	Code    string
	Message string
	Fix     json.RawMessage
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Do runs operation op ("ls", "write", ...) with the JSON request body req.
func Do(op string, req json.RawMessage) (json.RawMessage, *Error) {
	h, ok := ops[op]
	if !ok {
		return nil, &Error{Code: "S210", Message: "unknown fs operation: " + op}
	}
	v, err := h(req)
	if err != nil {
		return nil, err
	}
	b, merr := json.Marshal(v)
	if merr != nil {
		return nil, &Error{Code: "S216", Message: "fs i/o error: " + merr.Error()}
	}
	return b, nil
}

var ops = map[string]func(json.RawMessage) (any, *Error){}
