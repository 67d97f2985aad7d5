package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Message types: iii's wire frame names, each the lowercased name of its message variant.
const (
	TypeRegisterFunction          = "registerfunction"
	TypeUnregisterFunction        = "unregisterfunction"
	TypeRegisterTriggerType       = "registertriggertype"
	TypeUnregisterTriggerType     = "unregistertriggertype"
	TypeRegisterTrigger           = "registertrigger"
	TypeUnregisterTrigger         = "unregistertrigger"
	TypeTriggerRegistrationResult = "triggerregistrationresult"
	TypeRegisterService           = "registerservice"
	TypeInvokeFunction            = "invokefunction"
	TypeInvocationResult          = "invocationresult"
	TypeWorkerRegistered          = "workerregistered"
	TypeReattach                  = "reattach"
	TypeRegistrationRejected      = "registrationrejected"
	TypePing                      = "ping"
	TypePong                      = "pong"

	// The 0.26 observe frames. iii has not published their JSON: these names
	// follow the lowercased-variant rule and are a guess. The engine answers TypeObserve and
	// TypeUnobserve with TypeObserveResult carrying UNSUPPORTED while it advertises no features.
	TypeObserve       = "observe"
	TypeUnobserve     = "unobserve"
	TypeObserveResult = "observeresult"
)

// knownType returns the constant of the frame type t, "" when this implementation does not
// know it. A switch, not a map: it runs on every frame, and costs no hashing.
func knownType(t string) string {
	switch t {
	case TypeRegisterFunction:
		return TypeRegisterFunction
	case TypeUnregisterFunction:
		return TypeUnregisterFunction
	case TypeRegisterTriggerType:
		return TypeRegisterTriggerType
	case TypeUnregisterTriggerType:
		return TypeUnregisterTriggerType
	case TypeRegisterTrigger:
		return TypeRegisterTrigger
	case TypeUnregisterTrigger:
		return TypeUnregisterTrigger
	case TypeTriggerRegistrationResult:
		return TypeTriggerRegistrationResult
	case TypeRegisterService:
		return TypeRegisterService
	case TypeInvokeFunction:
		return TypeInvokeFunction
	case TypeInvocationResult:
		return TypeInvocationResult
	case TypeWorkerRegistered:
		return TypeWorkerRegistered
	case TypeReattach:
		return TypeReattach
	case TypeRegistrationRejected:
		return TypeRegistrationRejected
	case TypePing:
		return TypePing
	case TypePong:
		return TypePong
	case TypeObserve:
		return TypeObserve
	case TypeUnobserve:
		return TypeUnobserve
	case TypeObserveResult:
		return TypeObserveResult
	}
	return ""
}

// Message is one wire frame. Every frame type uses a subset of the fields; unknown JSON keys are
// ignored on decode and empty fields are left out on encode.
type Message struct {
	Type string `json:"type"`

	// registerfunction, unregisterfunction, registertrigger*, registerservice.
	ID             string          `json:"id,omitempty"`
	Name           string          `json:"name,omitempty"`
	Description    string          `json:"description,omitempty"`
	RequestFormat  json.RawMessage `json:"request_format,omitempty"`
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	TriggerType    string          `json:"trigger_type,omitempty"`
	Config         json.RawMessage `json:"config,omitempty"`
	// Protected (registerfunction) is an extension of this implementation: the engine admits a
	// call to the function only from a connection holding the registering worker's token (or a
	// token the same protected namespace accepts). Other engines ignore it.
	Protected bool `json:"protected,omitempty"`
	// Invocation (registerfunction) is iii's HTTP-invoked function, {url, method, timeout_ms,
	// headers, auth}: the engine calls the URL instead of the registering worker (package
	// httpfn); null counts as absent, as in iii.
	Invocation json.RawMessage `json:"invocation,omitempty"`
	// registertriggertype: JSON Schemas of a trigger's config and of the payload it fires with.
	TriggerRequestFormat json.RawMessage `json:"trigger_request_format,omitempty"`
	CallRequestFormat    json.RawMessage `json:"call_request_format,omitempty"`

	// invokefunction, invocationresult.
	InvocationID string          `json:"invocation_id,omitempty"`
	FunctionID   string          `json:"function_id,omitempty"`
	Data         json.RawMessage `json:"data,omitempty"`
	Action       *Action         `json:"action,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	Namespace    *string         `json:"namespace,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	Error        *Error          `json:"error,omitempty"`
	Traceparent  string          `json:"traceparent,omitempty"`
	Baggage      string          `json:"baggage,omitempty"`
	// TimeoutMS is an extension of this implementation: how long the engine waits for the
	// serving worker before answering "timeout". Other engines ignore it.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`

	// workerregistered, reattach, registrationrejected.
	WorkerID         string `json:"worker_id,omitempty"`
	ReattachToken    string `json:"reattach_token,omitempty"`
	PreviousWorkerID string `json:"previous_worker_id,omitempty"`
	Code             string `json:"code,omitempty"`
	OwnerWorkerID    string `json:"owner_worker_id,omitempty"`
	WorkerName       string `json:"worker_name,omitempty"`
}

// Action selects how an invokefunction is delivered; {"type":"void"} means no reply is wanted.
type Action struct {
	Type  string `json:"type"`
	Queue string `json:"queue,omitempty"`
}

// IsVoid reports whether the invocation wants no reply.
func (m *Message) IsVoid() bool {
	return m.Action != nil && m.Action.Type == "void" || m.Type == TypeInvokeFunction && m.InvocationID == ""
}

// HasInvocation reports whether a registerfunction asks for an HTTP-invoked function: an
// invocation that is present and not null.
func HasInvocation(m *Message) bool {
	return len(m.Invocation) != 0 && string(m.Invocation) != "null"
}

// NamespaceOr returns the frame's namespace, or def when it has none.
func (m *Message) NamespaceOr(def string) string {
	if m.Namespace == nil {
		return def
	}
	return *m.Namespace
}

// ErrUnknownType is returned by Decode for a frame whose type this implementation does not know;
// receivers ignore such frames (version skew).
var ErrUnknownType = errors.New("unknown message type")

// Decode parses one frame. It fails on invalid JSON, a missing type, an unknown type, and on a
// namespace that is present but not a string. The message never refers to b's memory, so the
// caller may reuse b at once.
func Decode(b []byte) (*Message, error) { return decode(b, false) }

// DecodeBorrowed is Decode for a receiver that handles the frame before it reuses b: the raw
// fields of the message (Data, Result, Metadata, Config, Invocation and the formats) refer to b instead of
// copies, which saves copying a payload that is only passed on. Own makes the message
// independent of b, for a receiver that keeps it longer.
func DecodeBorrowed(b []byte) (*Message, error) { return decode(b, true) }

func decode(b []byte, borrow bool) (*Message, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, errors.New("frame is not a JSON object")
	}
	m, err := decodeFrame(b, borrow)
	if err != nil {
		return nil, fmt.Errorf("decoding frame: %w", err)
	}
	if m.Type == "" {
		Recycle(m)
		return nil, errors.New("frame has no type")
	}
	if knownType(m.Type) == "" {
		t := m.Type
		Recycle(m)
		return nil, fmt.Errorf("%w %q", ErrUnknownType, t)
	}
	return m, nil
}

// Own copies the raw fields of a message from DecodeBorrowed, so it no longer refers to the
// decoded buffer.
func Own(m *Message) {
	for _, f := range []*json.RawMessage{&m.RequestFormat, &m.ResponseFormat, &m.Config, &m.Invocation, &m.TriggerRequestFormat,
		&m.CallRequestFormat, &m.Data, &m.Metadata, &m.Result} {
		if *f != nil {
			*f = append(json.RawMessage(nil), *f...)
		}
	}
}

// Encode renders a frame as JSON. Raw fields (data, result, formats, metadata, config) must
// already be valid JSON; frames decoded by Decode always are.
func Encode(m *Message) ([]byte, error) { return appendMessage(make([]byte, 0, 256), m), nil }

// AppendEncode appends the JSON of m to dst, for senders that reuse frame buffers.
func AppendEncode(dst []byte, m *Message) []byte { return appendMessage(dst, m) }
