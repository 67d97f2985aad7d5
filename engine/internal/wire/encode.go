package wire

import (
	"strconv"
	"unicode/utf8"
)

// appendMessage renders m as JSON without reflection; the result equals what encoding/json
// produces for Message (same keys, same omissions), except that raw fields are copied as given.
func appendMessage(b []byte, m *Message) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, m.Type)
	str := func(key, v string) {
		if v != "" {
			b = append(b, ',', '"')
			b = append(b, key...)
			b = append(b, '"', ':')
			b = appendString(b, v)
		}
	}
	raw := func(key string, v []byte) {
		if len(v) != 0 {
			b = append(b, ',', '"')
			b = append(b, key...)
			b = append(b, '"', ':')
			b = append(b, v...)
		}
	}
	str("id", m.ID)
	str("name", m.Name)
	str("description", m.Description)
	raw("request_format", m.RequestFormat)
	raw("response_format", m.ResponseFormat)
	str("trigger_type", m.TriggerType)
	raw("config", m.Config)
	if m.Protected {
		b = append(b, `,"protected":true`...)
	}
	raw("invocation", m.Invocation)
	raw("trigger_request_format", m.TriggerRequestFormat)
	raw("call_request_format", m.CallRequestFormat)
	str("invocation_id", m.InvocationID)
	str("function_id", m.FunctionID)
	raw("data", m.Data)
	if m.Action != nil {
		b = append(b, `,"action":{"type":`...)
		b = appendString(b, m.Action.Type)
		if m.Action.Queue != "" {
			b = append(b, `,"queue":`...)
			b = appendString(b, m.Action.Queue)
		}
		b = append(b, '}')
	}
	raw("metadata", m.Metadata)
	if m.Namespace != nil {
		b = append(b, `,"namespace":`...)
		b = appendString(b, *m.Namespace)
	}
	raw("result", m.Result)
	if m.Error != nil {
		b = append(b, `,"error":`...)
		b = m.Error.appendJSON(b)
	}
	str("traceparent", m.Traceparent)
	str("baggage", m.Baggage)
	if m.TimeoutMS != 0 {
		b = append(b, `,"timeout_ms":`...)
		b = strconv.AppendInt(b, m.TimeoutMS, 10)
	}
	str("worker_id", m.WorkerID)
	str("reattach_token", m.ReattachToken)
	str("previous_worker_id", m.PreviousWorkerID)
	str("code", m.Code)
	str("owner_worker_id", m.OwnerWorkerID)
	str("worker_name", m.WorkerName)
	return append(b, '}')
}

func (e *Error) appendJSON(b []byte) []byte {
	if e.raw != nil {
		return append(b, e.raw...)
	}
	b = append(b, `{"code":`...)
	b = appendString(b, e.Code)
	b = append(b, `,"message":`...)
	b = appendString(b, e.Message)
	if e.Stacktrace != "" {
		b = append(b, `,"stacktrace":`...)
		b = appendString(b, e.Stacktrace)
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string; invalid UTF-8 becomes U+FFFD like encoding/json.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
