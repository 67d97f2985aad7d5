package wire

import (
	"encoding/json"
	"errors"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeFrame parses one frame without reflection. It accepts what encoding/json accepts for
// Message (keys matched exactly or ASCII case-insensitively, the last duplicate wins, unknown
// keys skipped) and checks the whole input is one valid JSON object.
//
// With borrow, the raw fields (Data, Result, ...) refer to b instead of copies.
func decodeFrame(b []byte, borrow bool) (*Message, error) {
	p := parser{b: b}
	m := messages.Get().(*Message)
	p.ws()
	if !p.eat('{') {
		Recycle(m)
		return nil, p.fail("expected an object")
	}
	err := p.elements('}', func() error {
		key, err := p.key()
		if err != nil {
			return err
		}
		if err := p.colon(); err != nil {
			return err
		}
		switch key {
		case "type":
			if t, ok := p.typeName(); ok {
				m.Type = t
				return nil
			}
		case "function_id":
			if raw, ok := p.plainStr(); ok {
				m.FunctionID = *intern(raw)
				return nil
			}
		case "namespace":
			if raw, ok := p.plainStr(); ok {
				m.Namespace = intern(raw)
				return nil
			}
		}
		if dst := m.stringField(key); dst != nil && p.i < len(p.b) && p.b[p.i] == '"' {
			*dst, err = p.str()
			return err
		}
		start := p.i
		if err := p.skip(0); err != nil {
			return err
		}
		if dst := m.rawField(key); dst != nil && borrow {
			*dst = json.RawMessage(p.b[start:p.i:p.i])
			return nil
		}
		return m.set(key, p.b[start:p.i])
	})
	if err == nil {
		err = p.end()
	}
	if err != nil {
		Recycle(m)
		return nil, err
	}
	return m, nil
}

// messages holds the Messages that Decode fills; Recycle returns one.
var messages = sync.Pool{New: func() any { return new(Message) }}

// Recycle gives m back to the pool Decode draws from, for a receiver that is done with a
// decoded frame: m must not be used afterwards, by anyone. Its slices (Data, Result, ...) and
// the Error and Action it points to are not reused, so values taken from m stay valid.
func Recycle(m *Message) {
	*m = Message{}
	messages.Put(m)
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

var errWrongType = errors.New("frame field has the wrong JSON type")

// stringField is where a plain string field is stored, nil for other keys.
func (m *Message) stringField(key string) *string {
	switch key {
	case "type":
		return &m.Type
	case "id":
		return &m.ID
	case "name":
		return &m.Name
	case "description":
		return &m.Description
	case "trigger_type":
		return &m.TriggerType
	case "invocation_id":
		return &m.InvocationID
	case "function_id":
		return &m.FunctionID
	case "traceparent":
		return &m.Traceparent
	case "baggage":
		return &m.Baggage
	case "worker_id":
		return &m.WorkerID
	case "reattach_token":
		return &m.ReattachToken
	case "previous_worker_id":
		return &m.PreviousWorkerID
	case "code":
		return &m.Code
	case "owner_worker_id":
		return &m.OwnerWorkerID
	case "worker_name":
		return &m.WorkerName
	}
	return nil
}

// rawField returns the field of m that keeps key's value as raw JSON, nil for any other key.
func (m *Message) rawField(key string) *json.RawMessage {
	switch key {
	case "request_format":
		return &m.RequestFormat
	case "response_format":
		return &m.ResponseFormat
	case "config":
		return &m.Config
	case "invocation":
		return &m.Invocation
	case "trigger_request_format":
		return &m.TriggerRequestFormat
	case "call_request_format":
		return &m.CallRequestFormat
	case "data":
		return &m.Data
	case "metadata":
		return &m.Metadata
	case "result":
		return &m.Result
	}
	return nil
}

// isNull reports whether the JSON value v is null.
func isNull(v []byte) bool { return len(v) == 4 && string(v) == "null" }

// setString stores the JSON string v in dst; null leaves dst as it is.
func setString(dst *string, v []byte) error {
	if isNull(v) {
		return nil
	}
	if v[0] != '"' {
		return errWrongType
	}
	s, err := (&parser{b: v}).str()
	*dst = s
	return err
}

// set stores one field; v is a complete, valid JSON value.
func (m *Message) set(key string, v []byte) error {
	if dst := m.stringField(key); dst != nil {
		return setString(dst, v)
	}
	if dst := m.rawField(key); dst != nil {
		*dst = append(json.RawMessage(nil), v...)
		return nil
	}
	null := isNull(v)
	switch key {
	case "action":
		if null {
			m.Action = nil
			return nil
		}
		a := &Action{}
		if err := json.Unmarshal(v, a); err != nil {
			return err
		}
		m.Action = a
	case "namespace":
		if null {
			m.Namespace = nil
			return nil
		}
		var s string
		if err := setString(&s, v); err != nil {
			return err
		}
		m.Namespace = &s
	case "error":
		if null {
			m.Error = nil
			return nil
		}
		e := &Error{}
		if err := e.UnmarshalJSON(v); err != nil {
			return err
		}
		m.Error = e
	case "protected":
		switch string(v) {
		case "true":
			m.Protected = true
		case "false", "null":
			m.Protected = false
		default:
			return errWrongType
		}
	case "timeout_ms":
		if null {
			return nil
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return errWrongType
		}
		m.TimeoutMS = n
	}
	return nil
}

// frameKey returns the constant for a key of Message written exactly, "" for any other: the
// key then costs no allocation.
func frameKey(b []byte) string {
	switch string(b) {
	case "type":
		return "type"
	case "id":
		return "id"
	case "name":
		return "name"
	case "description":
		return "description"
	case "request_format":
		return "request_format"
	case "response_format":
		return "response_format"
	case "trigger_type":
		return "trigger_type"
	case "config":
		return "config"
	case "protected":
		return "protected"
	case "invocation":
		return "invocation"
	case "trigger_request_format":
		return "trigger_request_format"
	case "call_request_format":
		return "call_request_format"
	case "invocation_id":
		return "invocation_id"
	case "function_id":
		return "function_id"
	case "data":
		return "data"
	case "action":
		return "action"
	case "metadata":
		return "metadata"
	case "namespace":
		return "namespace"
	case "result":
		return "result"
	case "error":
		return "error"
	case "traceparent":
		return "traceparent"
	case "baggage":
		return "baggage"
	case "timeout_ms":
		return "timeout_ms"
	case "worker_id":
		return "worker_id"
	case "reattach_token":
		return "reattach_token"
	case "previous_worker_id":
		return "previous_worker_id"
	case "code":
		return "code"
	case "owner_worker_id":
		return "owner_worker_id"
	case "worker_name":
		return "worker_name"
	}
	return ""
}

// key reads an object key, lowercased (keys match ASCII case-insensitively, as with
// encoding/json); a known key written exactly is returned as the constant.
func (p *parser) key() (string, error) {
	if raw, next, ok := p.unescaped(); ok {
		if k := frameKey(raw); k != "" {
			p.i = next
			return k, nil
		}
	}
	k, err := p.str()
	return lowerASCII(k), err
}

// typeName reads a string value at p.i that is one of the known frame types, written
// without escapes, and returns the constant: the type of every frame then costs no allocation.
func (p *parser) typeName() (string, bool) {
	raw, next, ok := p.unescaped()
	if !ok {
		return "", false
	}
	t := knownType(string(raw))
	if t == "" {
		return "", false
	}
	p.i = next
	return t, true
}

// unescaped returns the content of the string at p.i when it holds no escape, and the index
// just past its closing quote; ok is false otherwise. It reads nothing: p.i stays.
func (p *parser) unescaped() (raw []byte, next int, ok bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, 0, false
	}
	end := p.i + 1
	for end < len(p.b) && p.b[end] != '"' && p.b[end] != '\\' {
		end++
	}
	if end >= len(p.b) || p.b[end] != '"' {
		return nil, 0, false
	}
	return p.b[p.i+1 : end], end + 1, true
}

// plainStr reads a string value at p.i written as plain ASCII (no escape, no control
// character), returning its bytes; otherwise it reports false and reads nothing.
func (p *parser) plainStr() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	end := p.i + 1
	for end < len(p.b) && p.b[end] < utf8.RuneSelf && plain[p.b[end]] {
		end++
	}
	if end >= len(p.b) || p.b[end] != '"' {
		return nil, false
	}
	raw := p.b[p.i+1 : end]
	p.i = end + 1
	return raw, true
}

const (
	internSlots = 1024 // strings interned at once, at most
	internMax   = 128  // longer strings are not interned
)

// interned holds recently decoded function ids and namespaces. They repeat from frame to frame,
// so a decode mostly finds the string already made instead of allocating it. A slot holds one
// string at a time, replaced on a miss; the strings are never changed, so frames may share them
// (a decoded Namespace may point to the same string as another frame's).
var (
	interned   [internSlots]atomic.Pointer[string]
	internSeed = maphash.MakeSeed()
)

// intern returns a string equal to b, one made before when the slot still holds it.
func intern(b []byte) *string {
	if len(b) > internMax {
		s := string(b)
		return &s
	}
	slot := &interned[maphash.Bytes(internSeed, b)%internSlots]
	if sp := slot.Load(); sp != nil && *sp == string(b) {
		return sp
	}
	s := string(b)
	slot.Store(&s)
	return &s
}

// Valid reports whether b is exactly one JSON value (white space around it allowed), like
// json.Valid but without its per-byte state machine.
func Valid(b []byte) bool {
	p := parser{b: b}
	p.ws()
	return p.skip(0) == nil && p.end() == nil
}

type parser struct {
	b []byte
	i int
}

func (p *parser) fail(msg string) error {
	return errors.New("invalid JSON at offset " + strconv.Itoa(p.i) + ": " + msg)
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *parser) end() error {
	p.ws()
	if p.i != len(p.b) {
		return p.fail("data after the object")
	}
	return nil
}

// elements reads the rest of an object or array whose opening bracket has been read: item reads
// one member or element at a time, separated by commas, up to close. Objects and arrays, in a
// frame and nested, share it, so they accept and reject alike.
func (p *parser) elements(close byte, item func() error) error {
	p.ws()
	if p.eat(close) {
		return nil
	}
	for {
		p.ws()
		if err := item(); err != nil {
			return err
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat(close) {
			return nil
		}
		return p.fail("expected ',' or '" + string(close) + "'")
	}
}

// colon moves past the ':' between an object key and its value, and the white space around it.
func (p *parser) colon() error {
	p.ws()
	if !p.eat(':') {
		return p.fail("expected ':'")
	}
	p.ws()
	return nil
}

const maxDepth = 10000

// skip moves past one JSON value, validating it.
func (p *parser) skip(depth int) error {
	if depth > maxDepth {
		return p.fail("nested too deeply")
	}
	if p.i >= len(p.b) {
		return p.fail("unexpected end")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.skipString()
	case c == '{':
		p.i++
		return p.elements('}', func() error {
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return p.fail("expected a key")
			}
			if err := p.skipString(); err != nil {
				return err
			}
			if err := p.colon(); err != nil {
				return err
			}
			return p.skip(depth + 1)
		})
	case c == '[':
		p.i++
		return p.elements(']', func() error { return p.skip(depth + 1) })
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return p.fail("unexpected character")
}

func (p *parser) literal(s string) error {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return nil
	}
	return p.fail("bad literal")
}

func (p *parser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

func (p *parser) number() error {
	p.eat('-')
	if p.eat('0') {
		if p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			return p.fail("leading zero")
		}
	} else if p.digits() == 0 {
		return p.fail("bad number")
	}
	if p.eat('.') && p.digits() == 0 {
		return p.fail("bad fraction")
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if !p.eat('+') {
			p.eat('-')
		}
		if p.digits() == 0 {
			return p.fail("bad exponent")
		}
	}
	return nil
}

// plain marks the bytes a JSON string holds as they are: not '"', '\\' or a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func (p *parser) skipString() error {
	p.i++
	for p.i < len(p.b) {
		// Runs of plain characters, the bulk of every frame, in a tight loop.
		i, b := p.i, p.b
		for i < len(b) && plain[b[i]] {
			i++
		}
		p.i = i
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			p.i++
			return nil
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return p.fail("unfinished escape")
			}
			switch p.b[p.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i += 2
			case 'u':
				if p.i+6 > len(p.b) || !isHex(p.b[p.i+2]) || !isHex(p.b[p.i+3]) || !isHex(p.b[p.i+4]) || !isHex(p.b[p.i+5]) {
					return p.fail("bad \\u escape")
				}
				p.i += 6
			default:
				return p.fail("bad escape")
			}
		case c < 0x20:
			return p.fail("control character in string")
		default:
			p.i++
		}
	}
	return p.fail("unterminated string")
}

// str parses a string value at p.i (validated) and returns it unescaped; invalid UTF-8 and lone
// surrogates become U+FFFD as with encoding/json.
func (p *parser) str() (string, error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", p.fail("expected a string")
	}
	start := p.i
	if err := p.skipString(); err != nil {
		return "", err
	}
	raw := p.b[start+1 : p.i-1]
	simple := true
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			simple = false
			break
		}
	}
	if simple {
		return string(raw), nil
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c == '\\' {
			switch raw[i+1] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(raw[i+2 : i+6])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if r2 := utf16.DecodeRune(r, hex4(raw[i+2:i+6])); r2 != utf8.RuneError {
							out = utf8.AppendRune(out, r2)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
				continue
			default:
				out = append(out, raw[i+1])
			}
			i += 2
			continue
		}
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, raw[i:i+size]...)
		}
		i += size
	}
	return string(out), nil
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
