// Package rbac is the access gate of an RBAC listener (iii's iii-worker-manager rbac: block):
// what a session opened on that listener may call, see and register. It holds no connections
// and calls no functions itself; package core asks it, and calls the auth function and the
// hooks it names.
//
// A session's rights come from the listener's auth function, called once per WebSocket upgrade
// with AuthInput {headers, query_params, ip_address}; its answer (AuthResult, ParseAuthResult)
// says which functions it may call beyond expose_functions, which it may never call, what it may
// register and the context passed to the middleware and the hooks. Fail closed: an auth function
// that is missing, errors, times out or answers no object refuses the connection.
//
// A call from a session is allowed (Config.Allowed) in iii's order: a forbidden_functions entry
// denies (everywhere); a grant of the session's namespaces map in the call's namespace allows;
// an allowed_functions entry allows in the default namespace; the infrastructure functions
// (Infrastructure) are allowed; a matching expose_functions filter allows; anything else is
// denied.
package rbac

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// DefaultNamespace is the namespace a filter or an allowed_functions grant applies to when it
// names none.
const DefaultNamespace = "default"

// Infrastructure are the engine functions every session may call whatever the filters say
// (unless forbidden_functions names them): connection set-up, channels, logging and baggage.
var Infrastructure = []string{
	"engine::channels::create", "engine::workers::register",
	"engine::log::info", "engine::log::warn", "engine::log::error", "engine::log::debug", "engine::log::trace",
	"engine::baggage::get", "engine::baggage::set", "engine::baggage::get_all",
}

// Config is a listener's rbac: block.
type Config struct {
	AuthFunctionID            string   // auth_function_id; empty: every connection is admitted with Open rights
	Expose                    []Filter // expose_functions; empty exposes nothing but Infrastructure
	OnFunctionRegistration    string   // on_function_registration_function_id
	OnTriggerRegistration     string   // on_trigger_registration_function_id
	OnTriggerTypeRegistration string   // on_trigger_type_registration_function_id
}

// GateFunctions are the function ids c names for its enforcer (the engine or the rbac-proxy) to
// call: the auth function and the registration hooks. Only a trusted connection (one without a
// session) may serve them: a session serving them would decide its own and others' rights.
func (c *Config) GateFunctions() []string {
	if c == nil {
		return nil
	}
	var ids []string
	for _, id := range []string{c.AuthFunctionID, c.OnFunctionRegistration, c.OnTriggerRegistration, c.OnTriggerTypeRegistration} {
		if id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// Keys are the keys of an rbac: block, in the order the README lists them.
var Keys = []string{"auth_function_id", "expose_functions", "on_function_registration_function_id",
	"on_trigger_registration_function_id", "on_trigger_type_registration_function_id"}

// Filter is one expose_functions entry: a wildcard on the function id (match("api::*")) or a
// set of metadata conditions that must all hold, scoped to Namespace (default when empty).
type Filter struct {
	Match     string
	Metadata  map[string]MetaMatch
	Namespace string
}

// MetaMatch is one metadata condition: an exact JSON value, or a wildcard on a string value
// (match("*public*")).
type MetaMatch struct {
	Pattern  string // when Wildcard
	Wildcard bool
	Exact    any // the value decoded from JSON (numbers as float64)
}

// ParseFilter reads one expose_functions entry as decoded from YAML: the string
// `match("pattern")` or a mapping with match (a bare pattern) or metadata, and optionally
// namespace. Anything else, unknown keys included, is an error, so a typo never widens or
// narrows the gate unnoticed.
func ParseFilter(v any) (Filter, error) {
	switch t := v.(type) {
	case string:
		p, ok := matchArg(t)
		if !ok {
			return Filter{}, fmt.Errorf("expected match(\"pattern\") or a mapping with match or metadata, got %q", t)
		}
		return Filter{Match: p}, nil
	case map[string]any:
		var f Filter
		var hasMatch bool
		for k, val := range t {
			switch k {
			case "match":
				s, ok := val.(string)
				if !ok {
					return Filter{}, fmt.Errorf("match must be a string pattern")
				}
				if p, ok := matchArg(s); ok {
					s = p
				}
				f.Match, hasMatch = s, true
			case "namespace":
				s, ok := val.(string)
				if !ok || strings.TrimSpace(s) == "" {
					return Filter{}, fmt.Errorf("namespace must be a non-empty string")
				}
				f.Namespace = s
			case "metadata":
				m, ok := val.(map[string]any)
				if !ok || len(m) == 0 {
					return Filter{}, fmt.Errorf("metadata must be a non-empty mapping of key: value")
				}
				f.Metadata = map[string]MetaMatch{}
				for mk, mv := range m {
					mm, err := metaMatch(mv)
					if err != nil {
						return Filter{}, fmt.Errorf("metadata.%s: %w", mk, err)
					}
					f.Metadata[mk] = mm
				}
			default:
				return Filter{}, fmt.Errorf("unknown key %q in an expose_functions filter; allowed: match, metadata, namespace", k)
			}
		}
		if hasMatch == (f.Metadata != nil) {
			return Filter{}, fmt.Errorf("a filter has exactly one of match or metadata")
		}
		return f, nil
	}
	return Filter{}, fmt.Errorf("expected match(\"pattern\") or a mapping with match or metadata")
}

func metaMatch(v any) (MetaMatch, error) {
	if s, ok := v.(string); ok {
		if p, ok := matchArg(s); ok {
			return MetaMatch{Pattern: p, Wildcard: true}, nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return MetaMatch{}, fmt.Errorf("not a JSON value: %w", err)
	}
	var exact any
	_ = json.Unmarshal(b, &exact)
	return MetaMatch{Exact: exact}, nil
}

// matchArg returns the pattern of `match("p")` or `match('p')`.
func matchArg(s string) (string, bool) {
	s = strings.TrimSpace(s)
	for _, q := range []string{`"`, `'`} {
		if strings.HasPrefix(s, "match("+q) && strings.HasSuffix(s, q+")") && len(s) >= len("match(")+2+1 {
			return s[len("match(")+1 : len(s)-2], true
		}
	}
	return "", false
}

// Match reports whether value matches pattern, where * stands for any run of characters and
// the pattern is anchored at both ends.
func Match(pattern, value string) bool {
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		return pattern == value
	}
	if !strings.HasPrefix(value, pattern[:star]) {
		return false
	}
	value, pattern = value[star:], pattern[star+1:]
	for {
		star = strings.IndexByte(pattern, '*')
		if star < 0 {
			return strings.HasSuffix(value, pattern)
		}
		i := strings.Index(value, pattern[:star])
		if i < 0 {
			return false
		}
		value, pattern = value[i+star:], pattern[star+1:]
	}
}

// Matches reports whether f exposes id in ns, given the function's registered metadata.
func (f Filter) Matches(id, ns string, metadata json.RawMessage) bool {
	return f.matches(id, ns, func() map[string]any { return decodeObject(metadata) })
}

func (f Filter) matches(id, ns string, metadata func() map[string]any) bool {
	scope := f.Namespace
	if scope == "" {
		scope = DefaultNamespace
	}
	if scope != ns {
		return false
	}
	if f.Metadata == nil {
		return Match(f.Match, id)
	}
	obj := metadata()
	if obj == nil {
		return false
	}
	for k, want := range f.Metadata {
		got, ok := obj[k]
		if !ok {
			return false
		}
		if want.Wildcard {
			s, isStr := got.(string)
			if !isStr || !Match(want.Pattern, s) {
				return false
			}
		} else if !reflect.DeepEqual(got, want.Exact) {
			return false
		}
	}
	return true
}

// decodeObject is metadata as a JSON object, nil when it is none.
func decodeObject(metadata json.RawMessage) map[string]any {
	var obj map[string]any
	if len(metadata) == 0 || json.Unmarshal(metadata, &obj) != nil {
		return nil
	}
	return obj
}

// Session is what the auth function granted one connection (iii's AuthResult).
type Session struct {
	Namespaces                   map[string][]string `json:"namespaces"`
	AllowedFunctions             []string            `json:"allowed_functions"`
	ForbiddenFunctions           []string            `json:"forbidden_functions"`
	AllowedTriggerTypes          []string            `json:"allowed_trigger_types"` // nil: every type
	AllowTriggerTypeRegistration bool                `json:"allow_trigger_type_registration"`
	AllowFunctionRegistration    bool                `json:"allow_function_registration"`
	Context                      json.RawMessage     `json:"context"`
	FunctionRegistrationPrefix   string              `json:"function_registration_prefix"`
	// IP is the address the connection came from (not part of the auth result).
	IP string `json:"-"`
}

// Open is the session of a listener whose rbac: block names no auth function, or that has only
// a middleware: it may register functions and triggers; expose_functions alone gates its calls.
// Like an auth result that does not say otherwise, it may not register trigger types: a
// provider receives every trigger of its type, with their functions and configs.
func Open() *Session {
	return &Session{AllowFunctionRegistration: true, Context: json.RawMessage("{}")}
}

// ParseAuthResult reads the auth function's answer. Anything but a JSON object is a refusal,
// and so is an object with a key an AuthResult does not have: a misspelt forbidden_functions
// must not silently allow what it meant to deny.
func ParseAuthResult(raw json.RawMessage) (*Session, error) {
	trimmed := strings.TrimSpace(string(raw))
	if trimmed == "" || trimmed == "null" {
		return nil, fmt.Errorf("the auth function returned no result")
	}
	if !strings.HasPrefix(trimmed, "{") {
		return nil, fmt.Errorf("the auth function returned %.40s, not an AuthResult object", trimmed)
	}
	s := &Session{AllowFunctionRegistration: true}
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(s); err != nil {
		if k, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return nil, fmt.Errorf("the auth function's result has the unknown key %s; an AuthResult has %s", k, strings.Join(AuthResultKeys, ", "))
		}
		return nil, fmt.Errorf("the auth function's result is not an AuthResult: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the auth function's result is not an AuthResult: data after the object")
	}
	if c := strings.TrimSpace(string(s.Context)); c == "" || c == "null" {
		s.Context = json.RawMessage("{}")
	}
	return s, nil
}

// AuthResultKeys are the keys of an AuthResult (Session).
var AuthResultKeys = []string{"allowed_functions", "forbidden_functions", "namespaces", "allowed_trigger_types",
	"allow_trigger_type_registration", "allow_function_registration", "function_registration_prefix", "context"}

// AuthInput is what the auth function is called with.
type AuthInput struct {
	Headers     map[string]string   `json:"headers"`
	QueryParams map[string][]string `json:"query_params"`
	IPAddress   string              `json:"ip_address"`
}

// NewAuthInput describes an upgrade request: its headers (names in lower case, repeated ones
// joined with ", "), its query parameters and the peer's IP address.
func NewAuthInput(r *http.Request) AuthInput {
	in := AuthInput{Headers: map[string]string{}, QueryParams: map[string][]string{}, IPAddress: PeerIP(r)}
	for k, v := range r.Header {
		in.Headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	for k, v := range r.URL.Query() {
		in.QueryParams[k] = v
	}
	return in
}

// PeerIP is the IP address of the request's peer.
func PeerIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// Allowed reports whether session s may call id in ns; metadata is the function's registered
// metadata (nil for an engine function or one not registered). c nil (a listener with only a
// middleware) exposes everything not forbidden.
func (c *Config) Allowed(s *Session, id, ns string, metadata json.RawMessage) bool {
	if slices.Contains(s.ForbiddenFunctions, id) {
		return false
	}
	for _, g := range s.Namespaces[ns] {
		if p, ok := matchArg(g); ok {
			g = p
		}
		if Match(g, id) {
			return true
		}
	}
	if ns == DefaultNamespace && slices.Contains(s.AllowedFunctions, id) {
		return true
	}
	if slices.Contains(Infrastructure, id) {
		return true
	}
	if c == nil {
		return true
	}
	var obj map[string]any
	decoded := false
	meta := func() map[string]any { // decoded once, and only for a metadata filter
		if !decoded {
			obj, decoded = decodeObject(metadata), true
		}
		return obj
	}
	for _, f := range c.Expose {
		if f.Metadata == nil && f.matches(id, ns, meta) {
			return true
		}
	}
	for _, f := range c.Expose {
		if f.Metadata != nil && f.matches(id, ns, meta) {
			return true
		}
	}
	return false
}

// MayDeclare reports whether s may register as a worker of namespace ns: any, unless the auth
// result scoped it to the keys of its namespaces map.
func (s *Session) MayDeclare(ns string) bool {
	if len(s.Namespaces) == 0 {
		return true
	}
	_, ok := s.Namespaces[ns]
	return ok
}

// MayUseTriggerType reports whether s may register a trigger of type t.
func (s *Session) MayUseTriggerType(t string) bool {
	return s.AllowedTriggerTypes == nil || slices.Contains(s.AllowedTriggerTypes, t)
}

// Prefixed is id as registered by s: "<prefix>::id" under a function_registration_prefix.
func (s *Session) Prefixed(id string) string {
	if s == nil || s.FunctionRegistrationPrefix == "" {
		return id
	}
	return s.FunctionRegistrationPrefix + "::" + id
}

// Local is the id s's worker knows a function by: id without s's prefix.
func (s *Session) Local(id string) string {
	if s == nil || s.FunctionRegistrationPrefix == "" {
		return id
	}
	return strings.TrimPrefix(id, s.FunctionRegistrationPrefix+"::")
}
