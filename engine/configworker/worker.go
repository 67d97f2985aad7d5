// Package configworker is the engine's configuration worker (iii's iii-configuration; package
// config is the engine's own config.yaml): named entries with a JSON Schema
// and a value, kept in files, read in expanded or template (raw) form.
//
// Functions: configuration::register, ::set, ::get, ::list, ::schema (iii's configuration API),
// plus configuration::publish, used by the Compose that owns the engine to set an entry in
// memory before it starts a worker (the adapter's <namespace>-sandbox-libkrun). Published
// entries are not registered ids: get reads them, list does not show them, set on them fails
// NOT_REGISTERED, and they are never written to disk. Only a caller that presented the token of
// a namespace marked owner in config.yaml may publish ({"id","value"}; a null value withdraws).
//
// Placeholders (${VAR}, ${VAR:default}) expand from the engine's environment, which holds
// secrets, only for a trusted caller (the owner, or a token-protected namespace's token holder)
// and only in a value a trusted writer put there (a file of the directory, a publish, a trusted
// register or set). Anyone else gets the template with an unexpanded reason, and a value it
// writes is stored marked untrusted and never expanded. Entries the engine reads itself
// (iii-observability) are the owner's alone.
package configworker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/interpolate"
)

var idRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// engineEntries are the ids the engine reads for itself at start (iii-observability: what it
// exports and where). Only the owner may register or set them (FORBIDDEN for anyone else), so
// no other caller can stop the engine from starting or send its telemetry elsewhere; the
// engine reads them with Own.
var engineEntries = map[string]bool{"iii-observability": true}

// checkEngineEntry refuses a register or set of an entry the engine consumes to a caller
// without the owner credential.
func checkEngineEntry(fn, id string, c core.Caller) error {
	if engineEntries[id] && !c.Owner {
		return fail(errcode.Forbidden, "function '%s' not allowed on configuration '%s': the engine reads that entry for itself, so only a caller holding the owner credential may write it (or the user, as %s.json in the configuration directory)", fn, id, id)
	}
	return nil
}

type entry struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Value       json.RawMessage `json:"value"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	compiled    *jsonschema.Schema
	schemaAny   any
	// untrusted: Value was written by a caller that is not trusted (see Worker.trusted), so its
	// placeholders are never expanded, for anyone.
	untrusted bool
}

// Worker holds the entries.
type Worker struct {
	store  fsStore
	lookup interpolate.Lookup // the environment values expand from
	eng    *core.Engine       // set by Install: tells a namespace token's holder

	mu         sync.Mutex
	registered map[string]*entry
	stored     map[string]fileEntry // entries on disk, registered or not
	published  map[string]json.RawMessage
}

// New loads the entries kept in dir, after closing dir (0700) and its entries (0600) to other
// local users; log (nil: slog.Default) hears about entries skipped because they cannot be read.
// Values expand ${VAR} from lookup (os.LookupEnv in the binary; nil: no variable is set), for
// trusted callers only (see trusted).
func New(dir string, log *slog.Logger, lookup interpolate.Lookup) (*Worker, error) {
	if log == nil {
		log = slog.Default()
	}
	w := &Worker{store: fsStore{dir: dir, log: log}, lookup: lookup, registered: map[string]*entry{}, published: map[string]json.RawMessage{}}
	w.store.tighten()
	stored, err := w.store.load()
	if err != nil {
		return nil, err
	}
	w.stored = stored
	return w, nil
}

// Install registers the configuration::* functions on the engine.
func (w *Worker) Install(e *core.Engine) {
	w.eng = e
	e.Handle("configuration::register", "Register a configuration entry: id, name, description, schema, initial_value?", w.register)
	e.Handle("configuration::set", "Set the value of a registered entry: id, value", w.set)
	e.Handle("configuration::get", "Read an entry: id, raw? (true = template form), published_only? (only what the owning Compose published)", w.get)
	e.Handle("configuration::list", "List registered entries (never values)", w.list)
	e.Handle("configuration::schema", "Read an entry's schema: id", w.schema)
	e.Handle("configuration::publish", "Owner only: set an in-memory entry (id, value) that set cannot change", w.publish)
}

// trusted reports whether c may have ${VAR} placeholders expanded from the engine's
// environment, and whether a value it writes is expanded for others: the owner (the owner
// credential, or a namespace's owner token) and a holder of a token-protected namespace's token
// (a project's workers) are; any other local process, a sandbox guest, an RBAC session and a
// call relayed by another engine are not, so none of them reads the engine's environment through
// an entry, its own or anyone's.
func (w *Worker) trusted(c core.Caller) bool {
	return c.Owner || w.eng != nil && w.eng.HoldsNamespaceToken(c)
}

// The unexpanded field of a get whose placeholders were withheld: the caller is not trusted, or
// the value's writer was not.
const (
	untrustedReader = "placeholders are expanded only for a caller holding the owner credential or a token-protected namespace's token; this value is the template"
	untrustedWriter = "the value was written by a caller holding neither the owner credential nor a token-protected namespace's token, so its placeholders are never expanded; this value is the template"
)

func fail(code, format string, args ...any) error { return protocol.NewError(code, format, args...) }

func checkID(id string) error {
	if !idRE.MatchString(id) {
		return fail(errcode.InvalidID, "invalid configuration id '%s': must match [a-z0-9_-]{1,64}", id)
	}
	return nil
}

// decode reads a request payload into v and checks the entry id it carries (id points into v):
// every configuration::* function takes one.
func decode(payload json.RawMessage, v any, id *string) error {
	if err := json.Unmarshal(payload, v); err != nil {
		return fail(errcode.InvalidArguments, "payload: %v", err)
	}
	return checkID(*id)
}

// idValue is the payload of set and publish.
type idValue struct {
	ID    string          `json:"id"`
	Value json.RawMessage `json:"value"`
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func compile(id string, schema json.RawMessage) (*jsonschema.Schema, any, error) {
	if isNull(schema) {
		return nil, nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, nil, fail(errcode.SchemaInvalid, "schema of '%s' is not JSON: %v", id, err)
	}
	c := jsonschema.NewCompiler()
	url := "mem:///" + id + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, fail(errcode.SchemaInvalid, "schema of '%s': %v", id, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, nil, fail(errcode.SchemaInvalid, "schema of '%s' does not compile: %v", id, oneLine(err))
	}
	var plain any
	_ = json.Unmarshal(schema, &plain)
	return s, plain, nil
}

func oneLine(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// validate checks the expanded form of value against the entry's schema. A value whose
// placeholders cannot all be resolved yet is accepted as a template.
func (en *entry) validate(value json.RawMessage, lookup interpolate.Lookup) error {
	if en.compiled == nil || isNull(value) {
		return nil
	}
	expanded, missing, err := expandValue(value, en.schemaAny, lookup)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return nil
	}
	return validateRaw(en.compiled, expanded)
}

func validateRaw(s *jsonschema.Schema, raw json.RawMessage) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fail(errcode.SchemaInvalid, "schema validation failed: value is not JSON: %v", err)
	}
	if err := s.Validate(inst); err != nil {
		return fail(errcode.SchemaInvalid, "schema validation failed: %s", oneLine(err))
	}
	return nil
}

func expandValue(value json.RawMessage, schema any, lookup interpolate.Lookup) (json.RawMessage, []string, error) {
	var v any
	if err := json.Unmarshal(value, &v); err != nil {
		return nil, nil, fail(errcode.InvalidArguments, "value is not JSON: %v", err)
	}
	x := newExpander(lookup)
	out, err := json.Marshal(x.value(v, schema))
	return out, x.missingVars(), err
}

func (en *entry) public() map[string]any {
	m := map[string]any{"id": en.ID, "name": en.Name, "description": en.Description, "schema": en.Schema}
	if !isNull(en.Metadata) {
		m["metadata"] = en.Metadata
	}
	return m
}

// checkSize refuses a value larger than MaxValueBytes.
func checkSize(id string, v json.RawMessage) error {
	if len(v) > MaxValueBytes {
		return fail(errcode.EntryTooLarge, "the value of configuration '%s' is %d bytes; an entry holds at most %d", id, len(v), MaxValueBytes)
	}
	return nil
}

func (w *Worker) persist(en *entry) error {
	fe := fileEntry{ID: en.ID, Name: en.Name, Description: en.Description, Value: append(json.RawMessage(nil), en.Value...), Untrusted: en.untrusted}
	if err := w.store.save(fe); err != nil {
		return fail(errcode.AdapterError, "saving configuration '%s': %v", en.ID, err)
	}
	w.stored[en.ID] = fe
	return nil
}

func (w *Worker) register(_ context.Context, c core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		ID           string          `json:"id"`
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		Schema       json.RawMessage `json:"schema"`
		InitialValue json.RawMessage `json:"initial_value"`
		Metadata     json.RawMessage `json:"metadata"`
	}
	if err := decode(payload, &in, &in.ID); err != nil {
		return nil, err
	}
	if err := checkEngineEntry("configuration::register", in.ID, c); err != nil {
		return nil, err
	}
	if err := checkSize(in.ID, in.InitialValue); err != nil {
		return nil, err
	}
	compiled, plain, err := compile(in.ID, in.Schema)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	en := &entry{ID: in.ID, Name: in.Name, Description: in.Description, Schema: in.Schema, Metadata: in.Metadata, compiled: compiled, schemaAny: plain}
	if en.Name == "" {
		en.Name = in.ID
	}
	if prev := w.registered[in.ID]; prev != nil {
		en.Value, en.untrusted = prev.Value, prev.untrusted
	} else if fe, ok := w.stored[in.ID]; ok {
		en.Value, en.untrusted = fe.Value, fe.Untrusted
	}
	trusted := w.trusted(c)
	hasInitial := !isNull(in.InitialValue)
	if hasInitial {
		en.Value, en.untrusted = in.InitialValue, !trusted
	}
	if isNull(en.Value) {
		en.Value = json.RawMessage("null")
	}
	if err := en.validate(en.Value, w.expansion(trusted && !en.untrusted)); err != nil {
		return nil, err
	}
	if hasInitial || w.stored[in.ID].ID == "" {
		if err := w.persist(en); err != nil {
			return nil, err
		}
	}
	w.registered[in.ID] = en
	out := en.public()
	out["value"] = en.Value
	return out, nil
}

// set changes the value of a registered entry. An id that nobody registered, such as
// iii-sandbox, fails NOT_REGISTERED (SCHEMA_UNAVAILABLE while a stored value waits for its
// owner) (req C2).
func (w *Worker) set(_ context.Context, c core.Caller, payload json.RawMessage) (any, error) {
	var in idValue
	if err := decode(payload, &in, &in.ID); err != nil {
		return nil, err
	}
	if err := checkEngineEntry("configuration::set", in.ID, c); err != nil {
		return nil, err
	}
	if len(in.Value) == 0 {
		in.Value = json.RawMessage("null")
	}
	if err := checkSize(in.ID, in.Value); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	en := w.registered[in.ID]
	if en == nil {
		if _, onDisk := w.stored[in.ID]; onDisk {
			return nil, fail(errcode.SchemaUnavailable, "configuration '%s' has no schema available yet; the owning worker must register before values can be set", in.ID)
		}
		return nil, fail(errcode.NotRegistered, "configuration '%s' is not registered; call configuration::register first", in.ID)
	}
	trusted := w.trusted(c)
	if err := en.validate(in.Value, w.expansion(trusted)); err != nil {
		return nil, err
	}
	old, oldUntrusted := en.Value, en.untrusted
	en.Value, en.untrusted = in.Value, !trusted
	if err := w.persist(en); err != nil {
		en.Value, en.untrusted = old, oldUntrusted
		return nil, err
	}
	return map[string]any{"old_value": old, "new_value": in.Value}, nil
}

// get reads an entry: published, else registered, else stored; raw returns the template form.
// An id with nothing behind it, such as iii-sandbox when there is nothing to move, is
// NOT_FOUND (req C3). With published_only, only an entry the owning Compose published counts:
// anyone may register an entry, so a reader that trusts its content (the sandbox adapter's
// settings) asks for the published one and falls back to its own file.
func (w *Worker) get(_ context.Context, c core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		ID            string `json:"id"`
		Raw           bool   `json:"raw"`
		PublishedOnly bool   `json:"published_only"`
	}
	if err := decode(payload, &in, &in.ID); err != nil {
		return nil, err
	}
	w.mu.Lock()
	var value json.RawMessage
	var en *entry
	untrusted := false // the value's writer
	if v, ok := w.published[in.ID]; ok {
		value = v
	} else if in.PublishedOnly {
		w.mu.Unlock()
		return nil, fail(errcode.NotFound, "configuration '%s' was not published by the Compose that owns this engine", in.ID)
	} else if en = w.registered[in.ID]; en != nil {
		value, untrusted = en.Value, en.untrusted
	} else if fe, ok := w.stored[in.ID]; ok {
		value, untrusted = fe.Value, fe.Untrusted
	}
	var compiled *jsonschema.Schema
	var schema any
	if en != nil {
		compiled, schema = en.compiled, en.schemaAny
	}
	w.mu.Unlock()
	if value == nil {
		return nil, fail(errcode.NotFound, "configuration '%s' not found", in.ID)
	}
	if in.Raw || isNull(value) {
		return map[string]any{"id": in.ID, "value": value}, nil
	}
	if untrusted {
		return map[string]any{"id": in.ID, "value": value, "unexpanded": untrustedWriter}, nil
	}
	if !w.trusted(c) {
		return map[string]any{"id": in.ID, "value": value, "unexpanded": untrustedReader}, nil
	}
	expanded, missing, err := expandValue(value, schema, w.lookup)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fail(errcode.ExpandFailed, "configuration '%s' references unset environment variable(s) with no default: %s", in.ID, strings.Join(missing, ", "))
	}
	if compiled != nil {
		if err := validateRaw(compiled, expanded); err != nil {
			return nil, err
		}
	}
	return map[string]any{"id": in.ID, "value": expanded}, nil
}

// list answers the registered entries only: an id that nobody registered is not listed (req C2).
func (w *Worker) list(context.Context, core.Caller, json.RawMessage) (any, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]map[string]any, 0, len(w.registered))
	ids := slices.Sorted(maps.Keys(w.registered))
	for _, id := range ids {
		out = append(out, w.registered[id].public())
	}
	return map[string]any{"configurations": out}, nil
}

func (w *Worker) schema(_ context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		ID string `json:"id"`
	}
	if err := decode(payload, &in, &in.ID); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	en := w.registered[in.ID]
	if en == nil {
		return nil, fail(errcode.NotFound, "configuration '%s' not found", in.ID)
	}
	return en.public(), nil
}

func (w *Worker) publish(_ context.Context, c core.Caller, payload json.RawMessage) (any, error) {
	if !c.Owner {
		return nil, fail(errcode.Forbidden, "function 'configuration::publish' not allowed (only the Compose that owns this engine may publish entries)")
	}
	var in idValue
	if err := decode(payload, &in, &in.ID); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if isNull(in.Value) {
		delete(w.published, in.ID)
		return map[string]any{"id": in.ID, "published": false}, nil
	}
	if !json.Valid(in.Value) {
		return nil, fail(errcode.InvalidArguments, "value is not JSON")
	}
	if err := checkSize(in.ID, in.Value); err != nil {
		return nil, err
	}
	w.published[in.ID] = append(json.RawMessage(nil), in.Value...)
	return map[string]any{"id": in.ID, "published": true}, nil
}

// Own reads, for the engine itself, entry id expanded from the engine's environment: published,
// else registered, else stored (nil, nil when there is none). A value stored for a caller
// without the owner credential or a namespace token is never used: Own answers FORBIDDEN
// naming the entry, which the engine logs before it goes on without it.
func (w *Worker) Own(id string) (json.RawMessage, error) {
	w.mu.Lock()
	var value json.RawMessage
	var compiled *jsonschema.Schema
	var schema any
	untrusted := false
	if v, ok := w.published[id]; ok {
		value = v
	} else if en := w.registered[id]; en != nil {
		value, untrusted, compiled, schema = en.Value, en.untrusted, en.compiled, en.schemaAny
	} else if fe, ok := w.stored[id]; ok {
		value, untrusted = fe.Value, fe.Untrusted
	}
	w.mu.Unlock()
	if value == nil || isNull(value) {
		return nil, nil
	}
	if untrusted {
		return nil, fail(errcode.Forbidden, "configuration '%s' in %s was written by a caller holding neither the owner credential nor a namespace token; the engine does not use it (write the file yourself, or remove it)", id, w.store.dir)
	}
	expanded, missing, err := expandValue(value, schema, w.lookup)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fail(errcode.ExpandFailed, "configuration '%s' references unset environment variable(s) with no default: %s", id, strings.Join(missing, ", "))
	}
	if compiled != nil {
		if err := validateRaw(compiled, expanded); err != nil {
			return nil, err
		}
	}
	return expanded, nil
}

// expansion is the lookup a value is validated with: the environment when its writer and the
// caller are trusted; else none, so a value is checked as a template and a schema's error can
// never tell an untrusted caller anything about a variable.
func (w *Worker) expansion(trusted bool) interpolate.Lookup {
	if trusted {
		return w.lookup
	}
	return nil
}
