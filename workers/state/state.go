// Package state is the state worker: a scoped key-value store on a JetStream key-value bucket,
// and the "state" trigger type that reports every committed change, as iii's state worker does.
//
// Functions (payloads and results are JSON):
//
//	state::set         {scope, key, value}  -> {old_value, new_value}
//	state::get         {scope, key}         -> the value, null when absent
//	state::delete      {scope, key}         -> the deleted value, null when absent
//	state::update      {scope, key, ops}    -> {old_value, new_value}
//	state::list        {scope}              -> [values of the scope, by key]
//	state::list_groups {}                   -> {groups: [scopes, sorted]}
//	state::list_keys   {scope}              -> {keys: [keys of the scope, sorted]}
//	state::compare-and-set {scope, key, expected?, value} -> {swapped: true} | {swapped: false, current}
//
// compare-and-set, as iii's: it stores value only if the key's current value equals expected
// (as JSON values: key order and spacing do not matter, 1 and 1.0 differ); expected omitted or
// null means "only if absent" (a stored null counts as absent). On a miss nothing is written
// and current is what is stored (null when absent), for the caller to recompute and retry.
// The check and the write are one compare-and-set on the key's revision, so of concurrent
// callers expecting the same value exactly one swaps.
//
// MaxValueBytes, when above 0, bounds the compact JSON size of every value written (set,
// compare-and-set, and the result of update): a larger one is refused with VALUE_TOO_LARGE and
// nothing is stored.
//
// update applies ops in order to the current value (null when absent); each op is
// {type: set|merge|increment|decrement|remove|append, path, value|by}, path being a dotted path
// into objects ("" is the whole value) or an array of literal segments. append, as iii's: onto
// an array it pushes the value, to a string it concatenates a string (any other value is
// refused); a missing or null target becomes the string appended, or else [value], and always
// [value] below a path of two segments or more. Every change is a compare-and-set on the key's revision,
// so concurrent writers (also on other engines sharing the bucket) never lose an update.
//
// Trigger type "state", config {scope?, key?, condition_function_id?}: after each committed
// change the worker calls the bound function with {type: "state", event_type:
// state:created|state:updated|state:deleted, scope, key, old_value, new_value}, for changes made
// through this worker. With condition_function_id it first calls that function, in the
// trigger's namespace, with the same event, as iii's: an answer of false skips the handler, a
// failed call skips it too (logged), any other answer (null included) lets it fire. Errors carry INVALID_ARGUMENTS
// or STATE_STORE_ERROR (CAS_ERROR and LIST_KEYS_ERROR for compare-and-set and list_keys, as iii
// names them), and VALUE_TOO_LARGE.
package state

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/condition"
	"github.com/iii-go/iii/workers/jsstore"
	"github.com/iii-go/iii/workers/triggerkeys"
)

// Codes of state errors.
const (
	CodeStoreError    = "STATE_STORE_ERROR"
	CodeCASError      = "CAS_ERROR"       // compare-and-set could not read or write the store
	CodeListKeysError = "LIST_KEYS_ERROR" // list_keys could not read the store
	CodeValueTooLarge = "VALUE_TOO_LARGE" // a value over MaxValueBytes
)

// Event is what a state trigger's function receives.
type Event struct {
	Type      string          `json:"type"` // always "state", as iii sends it
	EventType string          `json:"event_type"`
	Scope     string          `json:"scope"`
	Key       string          `json:"key"`
	OldValue  json.RawMessage `json:"old_value"`
	NewValue  json.RawMessage `json:"new_value"`
}

// Event types.
const (
	Created = "state:created"
	Updated = "state:updated"
	Deleted = "state:deleted"
)

// Fire delivers an event to a trigger's function.
type Fire func(t protocol.Trigger, ev Event)

// Service is the state worker's logic over one bucket.
type Service struct {
	kv   jetstream.KeyValue
	fire Fire

	// MaxValueBytes bounds the compact JSON size of a written value; 0 is no limit. Set it
	// before the service is used.
	MaxValueBytes int
	// Call answers triggers' condition functions; without it a trigger naming one is refused.
	// Log, when set, reports conditions that failed. Set both before the service is used.
	Call condition.Caller
	Log  *slog.Logger

	mu       sync.Mutex
	triggers map[string]stateTrigger
}

type stateTrigger struct {
	t          protocol.Trigger
	scope, key string
	condition  string
}

// BucketName is the bucket of a namespace: iii-state-<namespace> with other characters than
// letters, digits, '-' and '_' replaced.
func BucketName(namespace string) string {
	b := []byte(namespace)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return "iii-state-" + string(b)
}

// Open creates (or opens) the namespace's bucket.
func Open(ctx context.Context, js jetstream.JetStream, namespace string, replicas int, fire Fire) (*Service, error) {
	if replicas < 1 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketName(namespace), History: 1,
		Storage: jetstream.FileStorage, Replicas: replicas, Description: "iii state of namespace " + namespace})
	if err != nil {
		return nil, fmt.Errorf("opening the state bucket %s: %w", BucketName(namespace), err)
	}
	return &Service{kv: kv, fire: fire, triggers: map[string]stateTrigger{}}, nil
}

var enc = base64.RawURLEncoding

func kvKey(scope, key string) string {
	return enc.EncodeToString([]byte(scope)) + "." + enc.EncodeToString([]byte(key))
}

func splitKey(k string) (scope, key string, ok bool) {
	a, b, found := strings.Cut(k, ".")
	if !found {
		return "", "", false
	}
	s, err1 := enc.DecodeString(a)
	kk, err2 := enc.DecodeString(b)
	return string(s), string(kk), err1 == nil && err2 == nil
}

type request struct {
	Scope string          `json:"scope"`
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
	Ops   []Op            `json:"ops"`
}

func parse(payload json.RawMessage, needKey bool) (request, error) {
	var r request
	if err := json.Unmarshal(payload, &r); err != nil {
		return r, protocol.NewError(errcode.InvalidArguments, "the payload must be an object {scope, key, ...}: %v", err)
	}
	if r.Scope == "" {
		return r, protocol.NewError(errcode.InvalidArguments, "scope is required")
	}
	if needKey && r.Key == "" {
		return r, protocol.NewError(errcode.InvalidArguments, "key is required")
	}
	return r, nil
}

func storeErr(op string, err error) error {
	return protocol.NewError(CodeStoreError, "%s: %v", op, err)
}

func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// mutate runs change on the value of scope/key and commits the result (jsstore.Mutate), refusing
// a new value over MaxValueBytes; change returns the new value, or nil to delete. A committed
// change fires the triggers.
func (s *Service) mutate(ctx context.Context, scope, key string, change func(old json.RawMessage) (json.RawMessage, error)) (old, nw json.RawMessage, err error) {
	o, n, err := jsstore.Mutate(ctx, s.kv, kvKey(scope, key), func(b []byte) ([]byte, error) {
		var prev json.RawMessage
		if b != nil {
			prev = b
		}
		v, err := change(prev)
		if err == nil {
			err = s.checkSize(v)
		}
		return v, err
	})
	var me *jsstore.MutateError
	if errors.As(err, &me) {
		return nil, nil, storeErr(me.Op+" "+scope+"/"+key, me.Err)
	}
	if err != nil || (o == nil && n == nil) {
		return nil, nil, err
	}
	old, nw = o, n
	s.changed(scope, key, old, nw)
	return old, nw, nil
}

// checkSize refuses a value whose compact JSON is over MaxValueBytes.
func (s *Service) checkSize(v json.RawMessage) error {
	if s.MaxValueBytes <= 0 || len(v) <= s.MaxValueBytes {
		return nil
	}
	size := len(v)
	var b bytes.Buffer
	if json.Compact(&b, v) == nil {
		size = b.Len()
	}
	if size <= s.MaxValueBytes {
		return nil
	}
	return protocol.NewError(CodeValueTooLarge, "the value is %d bytes of JSON, over the state worker's max_value_bytes of %d", size, s.MaxValueBytes)
}

// Set stores a value.
func (s *Service) Set(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse(payload, true)
	if err != nil {
		return nil, err
	}
	v := orNull(r.Value)
	old, nw, err := s.mutate(ctx, r.Scope, r.Key, func(json.RawMessage) (json.RawMessage, error) { return v, nil })
	if err != nil {
		return nil, err
	}
	return map[string]json.RawMessage{"old_value": orNull(old), "new_value": orNull(nw)}, nil
}

// Get reads a value.
func (s *Service) Get(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse(payload, true)
	if err != nil {
		return nil, err
	}
	e, err := s.kv.Get(ctx, kvKey(r.Scope, r.Key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return json.RawMessage("null"), nil
	}
	if err != nil {
		return nil, storeErr("reading "+r.Scope+"/"+r.Key, err)
	}
	return json.RawMessage(e.Value()), nil
}

// Delete removes a value.
func (s *Service) Delete(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse(payload, true)
	if err != nil {
		return nil, err
	}
	old, _, err := s.mutate(ctx, r.Scope, r.Key, func(json.RawMessage) (json.RawMessage, error) { return nil, nil })
	if err != nil {
		return nil, err
	}
	return orNull(old), nil
}

// Update applies ops to a value.
func (s *Service) Update(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse(payload, true)
	if err != nil {
		return nil, err
	}
	old, nw, err := s.mutate(ctx, r.Scope, r.Key, func(old json.RawMessage) (json.RawMessage, error) { return Apply(orNull(old), r.Ops) })
	if err != nil {
		return nil, err
	}
	return map[string]json.RawMessage{"old_value": orNull(old), "new_value": orNull(nw)}, nil
}

func (s *Service) keys(ctx context.Context) ([]string, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	defer lister.Stop()
	var out []string
	for k := range lister.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// List returns the values of a scope, ordered by key.
func (s *Service) List(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse(payload, false)
	if err != nil {
		return nil, err
	}
	ks, err := s.keys(ctx)
	if err != nil {
		return nil, storeErr("listing "+r.Scope, err)
	}
	type kv struct {
		key string
		val json.RawMessage
	}
	var rows []kv
	for _, k := range ks {
		sc, key, ok := splitKey(k)
		if !ok || sc != r.Scope {
			continue
		}
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, storeErr("listing "+r.Scope, err)
		}
		rows = append(rows, kv{key, json.RawMessage(e.Value())})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].key < rows[j].key })
	out := make([]json.RawMessage, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.val)
	}
	return out, nil
}

// ListKeys returns the keys of a scope, sorted: {keys}.
func (s *Service) ListKeys(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse(payload, false)
	if err != nil {
		return nil, err
	}
	ks, err := s.keys(ctx)
	if err != nil {
		return nil, protocol.NewError(CodeListKeysError, "listing the keys of %s: %v", r.Scope, err)
	}
	keys := []string{}
	for _, k := range ks {
		if sc, key, ok := splitKey(k); ok && sc == r.Scope {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return map[string]any{"keys": keys}, nil
}

// errMiss ends a compare-and-set whose expectation did not hold.
var errMiss = errors.New("compare-and-set: the current value is not the expected one")

// CompareAndSet stores value only if the current value is the expected one:
// {scope, key, expected?, value} -> {swapped: true} or {swapped: false, current}.
func (s *Service) CompareAndSet(ctx context.Context, payload json.RawMessage) (any, error) {
	var in struct {
		Scope    string          `json:"scope"`
		Key      string          `json:"key"`
		Expected json.RawMessage `json:"expected"`
		Value    json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "state::compare-and-set needs {scope, key, expected?, value}: %v", err)
	}
	if in.Scope == "" || in.Key == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "state::compare-and-set needs a scope and a key")
	}
	if len(in.Value) == 0 {
		return nil, protocol.NewError(errcode.InvalidArguments, "state::compare-and-set needs a value (null stores null)")
	}
	var current json.RawMessage
	_, _, err := s.mutate(ctx, in.Scope, in.Key, func(old json.RawMessage) (json.RawMessage, error) {
		if !sameJSON(old, in.Expected) {
			current = orNull(old)
			return nil, errMiss
		}
		return in.Value, nil
	})
	switch {
	case errors.Is(err, errMiss):
		return map[string]any{"swapped": false, "current": current}, nil
	case err != nil:
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == CodeStoreError {
			return nil, protocol.NewError(CodeCASError, "%s", pe.Message)
		}
		return nil, err
	}
	return map[string]any{"swapped": true}, nil
}

// sameJSON reports whether a and b are the same JSON value; absent (empty) and null are the same.
func sameJSON(a, b json.RawMessage) bool {
	decode := func(r json.RawMessage) (any, bool) {
		if len(bytes.TrimSpace(r)) == 0 {
			return nil, true
		}
		d := json.NewDecoder(bytes.NewReader(r))
		d.UseNumber()
		var v any
		return v, d.Decode(&v) == nil
	}
	va, oka := decode(a)
	vb, okb := decode(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}

// ListGroups returns every scope that holds a value.
func (s *Service) ListGroups(ctx context.Context, _ json.RawMessage) (any, error) {
	ks, err := s.keys(ctx)
	if err != nil {
		return nil, storeErr("listing groups", err)
	}
	seen := map[string]bool{}
	groups := []string{}
	for _, k := range ks {
		if sc, _, ok := splitKey(k); ok && !seen[sc] {
			seen[sc] = true
			groups = append(groups, sc)
		}
	}
	sort.Strings(groups)
	return map[string]any{"groups": groups}, nil
}

// RegisterTrigger adds a state trigger: config {scope?, key?, condition_function_id?}.
// A Service is the provider of its trigger type.
var _ protocol.TriggerHandler = (*Service)(nil)

func (s *Service) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	if err := triggerkeys.Check("state", t.Config, "scope", "key", "condition_function_id"); err != nil {
		return err
	}
	var cfg struct {
		Scope     string `json:"scope"`
		Key       string `json:"key"`
		Condition string `json:"condition_function_id"`
	}
	if len(t.Config) > 0 && string(t.Config) != "null" {
		if err := json.Unmarshal(t.Config, &cfg); err != nil {
			return protocol.NewError(errcode.InvalidArguments, "state trigger config must be {scope?, key?, condition_function_id?}: %v", err)
		}
	}
	if cfg.Condition != "" && s.Call == nil {
		return protocol.NewError(errcode.InvalidArguments, "state trigger config: condition_function_id %q cannot be evaluated by this state service", cfg.Condition)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.triggers[t.ID] = stateTrigger{t: t, scope: cfg.Scope, key: cfg.Key, condition: cfg.Condition}
	return nil
}

// UnregisterTrigger removes a state trigger.
func (s *Service) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.triggers, t.ID)
	return nil
}

func (s *Service) changed(scope, key string, old, nw json.RawMessage) {
	ev := Event{Type: "state", Scope: scope, Key: key, OldValue: orNull(old), NewValue: orNull(nw)}
	switch {
	case old == nil:
		ev.EventType = Created
	case nw == nil:
		ev.EventType = Deleted
	default:
		ev.EventType = Updated
	}
	s.mu.Lock()
	var hit []stateTrigger
	for _, st := range s.triggers {
		if (st.scope == "" || st.scope == scope) && (st.key == "" || st.key == key) {
			hit = append(hit, st)
		}
	}
	s.mu.Unlock()
	for _, st := range hit {
		if st.condition == "" {
			s.fire(st.t, ev)
			continue
		}
		// The condition is a call with an answer: it runs beside the write, which does not
		// wait for it (as iii's state triggers run after the write answered).
		go func() {
			if s.passes(st, ev) {
				s.fire(st.t, ev)
			}
		}()
	}
}

// passes calls the trigger's condition function with ev: true unless it answers false or fails.
func (s *Service) passes(st stateTrigger, ev Event) bool {
	ok, err := condition.Ask(context.Background(), s.Call, st.condition, st.t.Namespace, ev)
	if err != nil && s.Log != nil {
		s.Log.Warn("state trigger condition failed; handler skipped", "trigger_id", st.t.ID, "condition_function_id", st.condition, "err", err)
	}
	return ok
}
