package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/iii-go/iii/internal/base/errcode"
)

// Error is a wire error body {"code","message","stacktrace"?}. Bodies with more keys (such as the
// sandbox S-code envelope) keep every key: Raw returns them exactly as received.
type Error struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	Stacktrace string `json:"stacktrace,omitempty"`
	raw        json.RawMessage
}

// NewError builds an error body from a code and a message.
func NewError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// RawError wraps a complete JSON error object (for example an S-code envelope); it is sent and
// relayed byte for byte.
func RawError(raw json.RawMessage) *Error {
	e := &Error{}
	if err := e.UnmarshalJSON(raw); err != nil {
		return NewError(errcode.Unknown, "%s", string(raw))
	}
	return e
}

// Error implements error.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Raw returns the complete error object as JSON.
func (e *Error) Raw() json.RawMessage {
	if e.raw != nil {
		return e.raw
	}
	b, _ := e.MarshalJSON()
	return b
}

// MarshalJSON writes the object as received when it came from the wire, else its fields.
func (e *Error) MarshalJSON() ([]byte, error) {
	if e.raw != nil {
		return e.raw, nil
	}
	type plain Error
	return json.Marshal((*plain)(e))
}

// UnmarshalJSON keeps the whole object and reads code, message and stacktrace from it. A bare
// string becomes the message of an UNKNOWN error.
func (e *Error) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*e = Error{Code: errcode.Unknown, Message: s}
		return nil
	}
	var f struct {
		Code       any    `json:"code"`
		Message    any    `json:"message"`
		Stacktrace string `json:"stacktrace"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*e = Error{Code: fmt.Sprint(orEmpty(f.Code)), Message: fmt.Sprint(orEmpty(f.Message)), Stacktrace: f.Stacktrace}
	e.raw = append(json.RawMessage(nil), b...)
	return nil
}

func orEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}
