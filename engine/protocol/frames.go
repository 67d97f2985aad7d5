package protocol

import (
	"encoding/json"

	"github.com/iii-go/iii/engine/internal/wire"
)

// Message is one wire frame. Every frame type uses a subset of the fields; unknown JSON keys are
// ignored on decode and empty fields are left out on encode. Its fields are documented with the
// codec's type (go doc github.com/iii-go/iii/engine/internal/wire.Message).
type Message = wire.Message

// Action selects how an invokefunction is delivered; {"type":"void"} means no reply is wanted.
type Action = wire.Action

// Error is a wire error body {"code","message","stacktrace"?}. Bodies with more keys (such as the
// sandbox S-code envelope) keep every key: Raw returns them exactly as received.
type Error = wire.Error

// Message types: iii's wire frame names, each the lowercased name of its message variant.
const (
	TypeRegisterFunction          = wire.TypeRegisterFunction
	TypeUnregisterFunction        = wire.TypeUnregisterFunction
	TypeRegisterTriggerType       = wire.TypeRegisterTriggerType
	TypeUnregisterTriggerType     = wire.TypeUnregisterTriggerType
	TypeRegisterTrigger           = wire.TypeRegisterTrigger
	TypeUnregisterTrigger         = wire.TypeUnregisterTrigger
	TypeTriggerRegistrationResult = wire.TypeTriggerRegistrationResult
	TypeRegisterService           = wire.TypeRegisterService
	TypeInvokeFunction            = wire.TypeInvokeFunction
	TypeInvocationResult          = wire.TypeInvocationResult
	TypeWorkerRegistered          = wire.TypeWorkerRegistered
	TypeReattach                  = wire.TypeReattach
	TypeRegistrationRejected      = wire.TypeRegistrationRejected
	TypePing                      = wire.TypePing
	TypePong                      = wire.TypePong

	// The 0.26 observe frames; their JSON names are a guess (see package wire).
	TypeObserve       = wire.TypeObserve
	TypeUnobserve     = wire.TypeUnobserve
	TypeObserveResult = wire.TypeObserveResult
)

// Well-known engine function ids.
const (
	FnRegisterWorker = "engine::workers::register"
	FnListWorkers    = "engine::workers::list"
	FnListFunctions  = "engine::functions::list"
)

// ErrUnknownType is returned by Decode for a frame whose type this implementation does not know;
// receivers ignore such frames (version skew).
var ErrUnknownType = wire.ErrUnknownType

// Decode parses one frame. It fails on invalid JSON, a missing type, an unknown type, and on a
// namespace that is present but not a string. The message never refers to b's memory, so the
// caller may reuse b at once.
func Decode(b []byte) (*Message, error) { return wire.Decode(b) }

// Encode renders a frame as JSON. Raw fields (data, result, formats, metadata, config) must
// already be valid JSON; frames decoded by Decode always are.
func Encode(m *Message) ([]byte, error) { return wire.Encode(m) }

// NewError builds an error body from a code and a message.
func NewError(code, format string, args ...any) *Error {
	return wire.NewError(code, format, args...)
}

// RawError wraps a complete JSON error object (for example an S-code envelope); it is sent and
// relayed byte for byte.
func RawError(raw json.RawMessage) *Error { return wire.RawError(raw) }
