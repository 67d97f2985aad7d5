// Package stream is the stream worker, as iii's iii-stream: items addressed by stream_name >
// group_id > item_id in a JetStream key-value bucket, the "stream" trigger type that reports
// every change, and a WebSocket endpoint (see Hub) where clients join a group or an item and
// receive its changes, with the "stream:join" and "stream:leave" trigger types (see JoinLeave).
//
// Functions (payloads and results are JSON, as iii's):
//
//	stream::set         {stream_name, group_id, item_id, data} -> {old_value, new_value}
//	stream::get         {stream_name, group_id, item_id}       -> the item, null when absent
//	stream::delete      {stream_name, group_id, item_id}       -> {old_value}
//	stream::update      {stream_name, group_id, item_id, ops}  -> {old_value, new_value}
//	stream::list        {stream_name, group_id}                -> [items of the group, by item_id]
//	stream::list_groups {stream_name}                          -> [group ids, sorted]
//	stream::list_all    {}                                     -> {stream: [{id, groups}], count}
//	stream::send        {stream_name, group_id, id?, type, data} -> null (an event, not stored)
//
// A worker's custom stream (iii-sdk's createStream: stream::get(<name>) and the like, see
// custom.go) serves that stream's operations in place of the store.
//
// update's ops are the state worker's (set, merge, increment, decrement, append, remove; see
// state.Apply). Every write is a compare-and-set on the item's revision, so concurrent writers,
// also other stream workers on one NATS cluster, never lose an update. A value is absent or
// present: old_value is null when the item did not exist.
//
// Each change is a Message: {type: "stream", timestamp, streamName, groupId, id, event}, event
// being {type: create|update, data: new value}, {type: delete, data: old value} or, for
// stream::send, {type: "event", event: {type, data}}. It goes to the stream triggers of this
// worker and, on the NATS subject of its group, to every WebSocket client of every stream worker
// sharing the store.
//
// Trigger type "stream", config {stream_name, group_id?, item_id?, condition_function_id?}: the
// bound function gets the Message of each matching change made through this worker; with a
// condition function, only when that function does not answer false (as iii's). Each trigger
// gets its changes one at a time, in the order they were committed (at most MaxPending waiting).
// Errors carry
// INVALID_ARGUMENTS or iii's STREAM_*_ERROR codes.
package stream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/jsstore"
	"github.com/iii-go/iii/workers/state"
)

// Codes of stream errors, as iii names them.
const (
	CodeSetError        = "STREAM_SET_ERROR"
	CodeGetError        = "STREAM_GET_ERROR"
	CodeDeleteError     = "STREAM_DELETE_ERROR"
	CodeUpdateError     = "STREAM_UPDATE_ERROR"
	CodeListError       = "STREAM_GET_GROUP_ERROR"
	CodeListGroupsError = "STREAM_LIST_GROUPS_ERROR"
	CodeListAllError    = "STREAM_LIST_ALL_ERROR"
	CodeSendError       = "STREAM_SEND_ERROR"
)

// Trigger types: stream changes, and WebSocket clients joining and leaving a stream.
const (
	TriggerType      = "stream"
	JoinTriggerType  = "stream:join"
	LeaveTriggerType = "stream:leave"
)

// MaxPending bounds the changes waiting for one trigger's function; past it new changes are
// dropped for that trigger (and logged) rather than held without limit.
const MaxPending = 10000

// Event is the event of a Message: a change (create, update, delete with data) or, from
// stream::send, a custom event (type "event" with Event set).
type Event struct {
	Type  string          `json:"type"`
	Data  json.RawMessage `json:"data,omitempty"`
	Event *Custom         `json:"event,omitempty"`
}

// Custom is the event stream::send delivers.
type Custom struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// Message is one change of a stream, as iii sends it to triggers and WebSocket clients.
type Message struct {
	Type       string  `json:"type"` // always "stream"
	Timestamp  int64   `json:"timestamp"`
	StreamName string  `json:"streamName"`
	GroupID    string  `json:"groupId"`
	ID         *string `json:"id"`
	Event      Event   `json:"event"`
}

// Caller calls a function through the engine (a *protocol.Worker).
type Caller interface {
	Call(ctx context.Context, fn string, payload any, opts ...protocol.CallOption) (json.RawMessage, error)
}

// Service is the stream worker's logic over one bucket and one NATS connection.
type Service struct {
	kv      jetstream.KeyValue
	nc      *nats.Conn
	subject string // iii.stream.<namespace>
	call    Caller
	// Log reports failed trigger deliveries; nil discards them.
	Log func(msg string, args ...any)
	// CallTimeout bounds one trigger delivery (default 30s).
	CallTimeout time.Duration

	mu       sync.Mutex
	triggers map[string]streamTrigger
	joins    map[string]protocol.Trigger // stream:join triggers, by id
	leaves   map[string]protocol.Trigger // stream:leave triggers, by id
}

type streamTrigger struct {
	t   protocol.Trigger
	cfg TriggerConfig
	q   *queue
}

// queue holds one trigger's undelivered changes: they go out one at a time, in commit order,
// so a handler sees create before update and a slow handler delays only its own trigger.
type queue struct {
	mu      sync.Mutex
	pending []Message
	running bool
}

// TriggerConfig is a stream trigger's config.
type TriggerConfig struct {
	StreamName          string `json:"stream_name"`
	GroupID             string `json:"group_id,omitempty"`
	ItemID              string `json:"item_id,omitempty"`
	ConditionFunctionID string `json:"condition_function_id,omitempty"`
}

func clean(namespace string) string {
	b := []byte(namespace)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// BucketName is the bucket of a namespace: iii-stream-<namespace>, other characters than
// letters, digits, '-' and '_' replaced.
func BucketName(namespace string) string { return "iii-stream-" + clean(namespace) }

// Options of Open.
type Options struct {
	Replicas int  // replicas of the bucket on a cluster (at least 1)
	Memory   bool // keep the bucket in memory (iii's store_method: in_memory): lost on restart
}

// Open creates (or opens) the namespace's bucket; call answers condition functions and
// delivers triggers.
func Open(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, namespace string, opts Options, call Caller) (*Service, error) {
	if opts.Replicas < 1 {
		opts.Replicas = 1
	}
	storage := jetstream.FileStorage
	if opts.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketName(namespace), History: 1,
		Storage: storage, Replicas: opts.Replicas, Description: "iii streams of namespace " + namespace})
	if err != nil {
		return nil, fmt.Errorf("opening the stream bucket %s: %w", BucketName(namespace), err)
	}
	return &Service{kv: kv, nc: nc, subject: "iii.stream." + clean(namespace), call: call, triggers: map[string]streamTrigger{},
		joins: map[string]protocol.Trigger{}, leaves: map[string]protocol.Trigger{}}, nil
}

var enc = base64.RawURLEncoding

func itemKey(stream, group, item string) string {
	return enc.EncodeToString([]byte(stream)) + "." + enc.EncodeToString([]byte(group)) + "." + enc.EncodeToString([]byte(item))
}

func splitKey(k string) (stream, group, item string, ok bool) {
	parts := strings.Split(k, ".")
	if len(parts) != 3 {
		return "", "", "", false
	}
	var out [3]string
	for i, p := range parts {
		b, err := enc.DecodeString(p)
		if err != nil {
			return "", "", "", false
		}
		out[i] = string(b)
	}
	return out[0], out[1], out[2], true
}

// groupSubject is the NATS subject of a group's messages.
func (s *Service) groupSubject(stream, group string) string {
	return s.subject + "." + enc.EncodeToString([]byte(stream)) + "." + enc.EncodeToString([]byte(group))
}

type request struct {
	StreamName string          `json:"stream_name"`
	GroupID    string          `json:"group_id"`
	ItemID     string          `json:"item_id"`
	Data       json.RawMessage `json:"data"`
	Ops        []state.Op      `json:"ops"`
}

// parse reads a payload; need lists the fields that must be non-empty.
func parse(fn string, payload json.RawMessage, need ...string) (request, error) {
	var r request
	if err := json.Unmarshal(payload, &r); err != nil {
		return r, protocol.NewError(errcode.InvalidArguments, "%s: the payload must be an object {%s}: %v", fn, strings.Join(need, ", "), err)
	}
	for _, f := range need {
		v := map[string]string{"stream_name": r.StreamName, "group_id": r.GroupID, "item_id": r.ItemID}[f]
		if v == "" {
			return r, protocol.NewError(errcode.InvalidArguments, "%s: %s is required (a non-empty string)", fn, f)
		}
	}
	return r, nil
}

func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// mutate runs change on the current item and commits the result (jsstore.Mutate). change
// returns the new value, or nil to delete; a store failure is code.
func (s *Service) mutate(ctx context.Context, code string, r request, change func(old json.RawMessage) (json.RawMessage, error)) (old, nw json.RawMessage, err error) {
	o, n, err := jsstore.Mutate(ctx, s.kv, itemKey(r.StreamName, r.GroupID, r.ItemID), func(b []byte) ([]byte, error) {
		if b == nil {
			return change(nil)
		}
		return change(json.RawMessage(b))
	})
	var me *jsstore.MutateError
	if errors.As(err, &me) {
		return nil, nil, protocol.NewError(code, "%s %s/%s/%s: %v", me.Op, r.StreamName, r.GroupID, r.ItemID, me.Err)
	}
	if err != nil {
		return nil, nil, err
	}
	return raw(o), raw(n), nil
}

// raw is b as JSON, nil for nil.
func raw(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

// changed reports a committed write: create or update (old absent or not), or delete.
func (s *Service) changed(r request, old, nw json.RawMessage) {
	id := r.ItemID
	m := Message{StreamName: r.StreamName, GroupID: r.GroupID, ID: &id}
	switch {
	case nw == nil:
		m.Event = Event{Type: "delete", Data: old}
	case old == nil:
		m.Event = Event{Type: "create", Data: nw}
	default:
		m.Event = Event{Type: "update", Data: nw}
	}
	s.emit(m)
}

// emit stamps m, hands it to the matching triggers and publishes it to the group's subject.
func (s *Service) emit(m Message) error {
	m.Type = "stream"
	m.Timestamp = time.Now().UnixMilli()
	s.fire(m)
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := s.nc.Publish(s.groupSubject(m.StreamName, m.GroupID), b); err != nil {
		return err
	}
	return s.nc.Flush()
}

// Set stores an item.
func (s *Service) Set(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse("stream::set", payload, "stream_name", "group_id", "item_id")
	if err != nil {
		return nil, err
	}
	if len(r.Data) == 0 {
		return nil, protocol.NewError(errcode.InvalidArguments, "stream::set: data is required (null stores null)")
	}
	if out, ok, err := s.customWrite(ctx, "stream::set", CodeSetError, r, payload); ok {
		return out, err
	}
	v := r.Data
	old, nw, err := s.mutate(ctx, CodeSetError, r, func(json.RawMessage) (json.RawMessage, error) { return v, nil })
	if err != nil {
		return nil, err
	}
	s.changed(r, old, nw)
	return map[string]json.RawMessage{"old_value": orNull(old), "new_value": nw}, nil
}

// Get reads an item: its value, null when absent.
func (s *Service) Get(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse("stream::get", payload, "stream_name", "group_id", "item_id")
	if err != nil {
		return nil, err
	}
	return s.get(ctx, r.StreamName, r.GroupID, r.ItemID)
}

func (s *Service) get(ctx context.Context, stream, group, item string) (json.RawMessage, error) {
	in := map[string]string{"stream_name": stream, "group_id": group, "item_id": item}
	if out, ok, err := s.custom(ctx, "stream::get", stream, in); ok {
		return orNull(out), err
	}
	e, err := s.kv.Get(ctx, itemKey(stream, group, item))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return json.RawMessage("null"), nil
	}
	if err != nil {
		return nil, protocol.NewError(CodeGetError, "reading %s/%s/%s: %v", stream, group, item, err)
	}
	return json.RawMessage(e.Value()), nil
}

// Delete removes an item: {old_value}.
func (s *Service) Delete(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse("stream::delete", payload, "stream_name", "group_id", "item_id")
	if err != nil {
		return nil, err
	}
	if out, ok, err := s.customWrite(ctx, "stream::delete", CodeDeleteError, r, payload); ok {
		return out, err
	}
	old, _, err := s.mutate(ctx, CodeDeleteError, r, func(json.RawMessage) (json.RawMessage, error) { return nil, nil })
	if err != nil {
		return nil, err
	}
	if old != nil {
		s.changed(r, old, nil)
	}
	return map[string]json.RawMessage{"old_value": orNull(old)}, nil
}

// Update applies ops to an item (null when absent): {old_value, new_value}.
func (s *Service) Update(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse("stream::update", payload, "stream_name", "group_id", "item_id")
	if err != nil {
		return nil, err
	}
	if r.Ops == nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "stream::update: ops is required (a list of operations)")
	}
	if out, ok, err := s.customWrite(ctx, "stream::update", CodeUpdateError, r, payload); ok {
		return out, err
	}
	old, nw, err := s.mutate(ctx, CodeUpdateError, r, func(old json.RawMessage) (json.RawMessage, error) {
		return state.Apply(orNull(old), r.Ops)
	})
	if err != nil {
		return nil, err
	}
	s.changed(r, old, nw)
	return map[string]json.RawMessage{"old_value": orNull(old), "new_value": nw}, nil
}

// keys lists the decoded keys of the bucket under a subject filter (">" for all), so a group's
// list reads only that group's keys.
func (s *Service) keys(ctx context.Context, filter string) ([][3]string, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, err
	}
	defer lister.Stop()
	var out [][3]string
	for k := range lister.Keys() {
		if st, g, i, ok := splitKey(k); ok {
			out = append(out, [3]string{st, g, i})
		}
	}
	return out, nil
}

// List returns the items of a group, ordered by item_id.
func (s *Service) List(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse("stream::list", payload, "stream_name", "group_id")
	if err != nil {
		return nil, err
	}
	return s.list(ctx, r.StreamName, r.GroupID)
}

func (s *Service) list(ctx context.Context, stream, group string) ([]json.RawMessage, error) {
	in := map[string]string{"stream_name": stream, "group_id": group}
	if out, ok, err := s.custom(ctx, "stream::list", stream, in); ok {
		if err != nil {
			return nil, err
		}
		items := []json.RawMessage{}
		if !isNull(out) {
			if err := json.Unmarshal(out, &items); err != nil {
				return nil, protocol.NewError(CodeJSONError, "%s returned %s, not a list of items: %v", customID("stream::list", stream), clip(out), err)
			}
		}
		return items, nil
	}
	ks, err := s.keys(ctx, enc.EncodeToString([]byte(stream))+"."+enc.EncodeToString([]byte(group))+".*")
	if err != nil {
		return nil, protocol.NewError(CodeListError, "listing %s/%s: %v", stream, group, err)
	}
	var items []string
	for _, k := range ks {
		if k[0] == stream && k[1] == group {
			items = append(items, k[2])
		}
	}
	sort.Strings(items)
	out := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		e, err := s.kv.Get(ctx, itemKey(stream, group, it))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, protocol.NewError(CodeListError, "listing %s/%s: %v", stream, group, err)
		}
		out = append(out, json.RawMessage(e.Value()))
	}
	return out, nil
}

// groups returns the sorted groups of every stream under filter.
func (s *Service) groups(ctx context.Context, filter string) (map[string][]string, error) {
	ks, err := s.keys(ctx, filter)
	if err != nil {
		return nil, err
	}
	seen := map[[2]string]bool{}
	out := map[string][]string{}
	for _, k := range ks {
		if g := [2]string{k[0], k[1]}; !seen[g] {
			seen[g] = true
			out[k[0]] = append(out[k[0]], k[1])
		}
	}
	for _, g := range out {
		sort.Strings(g)
	}
	return out, nil
}

// ListGroups returns the groups of a stream that hold an item, sorted.
func (s *Service) ListGroups(ctx context.Context, payload json.RawMessage) (any, error) {
	r, err := parse("stream::list_groups", payload, "stream_name")
	if err != nil {
		return nil, err
	}
	if out, ok, err := s.custom(ctx, "stream::list_groups", r.StreamName, payload); ok {
		return orNull(out), err
	}
	all, err := s.groups(ctx, enc.EncodeToString([]byte(r.StreamName))+".>")
	if err != nil {
		return nil, protocol.NewError(CodeListGroupsError, "listing the groups of %s: %v", r.StreamName, err)
	}
	if g := all[r.StreamName]; g != nil {
		return g, nil
	}
	return []string{}, nil
}

// StreamInfo is one stream of stream::list_all.
type StreamInfo struct {
	ID     string   `json:"id"`
	Groups []string `json:"groups"`
}

// ListAll returns every stream with its groups: {stream: [{id, groups}], count}.
func (s *Service) ListAll(ctx context.Context, _ json.RawMessage) (any, error) {
	all, err := s.groups(ctx, ">")
	if err != nil {
		return nil, protocol.NewError(CodeListAllError, "listing the streams: %v", err)
	}
	streams := make([]StreamInfo, 0, len(all))
	for id, g := range all {
		streams = append(streams, StreamInfo{ID: id, Groups: g})
	}
	sort.Slice(streams, func(i, j int) bool { return streams[i].ID < streams[j].ID })
	return map[string]any{"stream": streams, "count": len(streams)}, nil
}

// Send delivers a custom event {type, data} to the subscribers of a group (or, with id, of
// one item) and to the matching triggers, without storing anything.
func (s *Service) Send(_ context.Context, payload json.RawMessage) (any, error) {
	var in struct {
		StreamName string          `json:"stream_name"`
		GroupID    string          `json:"group_id"`
		ID         *string         `json:"id"`
		Type       string          `json:"type"`
		Data       json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(payload, &in); err != nil || in.StreamName == "" || in.GroupID == "" || in.Type == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "stream::send needs {stream_name, group_id, id?, type, data}")
	}
	m := Message{StreamName: in.StreamName, GroupID: in.GroupID, ID: in.ID,
		Event: Event{Type: "event", Event: &Custom{Type: in.Type, Data: orNull(in.Data)}}}
	if err := s.emit(m); err != nil {
		return nil, protocol.NewError(CodeSendError, "sending to %s/%s: %v", in.StreamName, in.GroupID, err)
	}
	return nil, nil
}
