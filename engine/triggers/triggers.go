// Package triggers is the engine's observer registry: trigger types offered by provider
// workers and the triggers other workers bind to them.
//
// Today it speaks the 0.22 trigger frames exactly:
//
//   - registertriggertype from a worker makes it the provider of that type in its namespace; a
//     later provider of the same type takes over, and the earlier one is told to drop its
//     triggers (unregistertrigger), so no event fires twice. The earlier one is kept: when the
//     provider that displaced it leaves (or unregisters the type), it is the provider again and
//     gets the triggers back. A Gated peer (a session of a gated listener) may not displace a
//     provider that is not: it would receive every trigger of the type, with their configs,
//     and stop them firing.
//   - registertrigger from any worker is stored and forwarded, frame for frame, to the
//     provider of its trigger_type (looked up in the worker's namespace, then in default), with
//     namespace set to where the bound function resolves. With no provider it is parked, with
//     no answer, and sent once one registers.
//   - triggerregistrationresult is accepted only from the provider the trigger was sent to.
//     An error parks the trigger again and is relayed to the worker that registered it;
//     success is not relayed (as the 0.23 engine).
//   - unregistertrigger reaches the provider the same way.
//   - When a provider disconnects (or unregisters its type) its triggers are parked, and sent
//     again to the next provider of the type. When a worker disconnects its triggers go, and
//     their providers get unregistertrigger.
//   - A trigger identical to one another worker registered (same namespace, trigger_type,
//     function_id and config: what every instance of one worker registers when several serve a
//     function) is that trigger's twin, not a second one: the provider hears of it once, so an
//     event fires once, not once per instance. When the trigger's owner leaves or unregisters
//     it, its first twin takes it over, and the provider hears nothing.
//
// The registry knows nothing of sockets: a worker is a Peer. The 0.26 observe model (an
// Observer whose source is a function, owner hooks, capture and filters) is meant to sit behind
// the same Registry as a second adapter; until a real 0.26 SDK has been run against it the
// engine advertises no features and answers observe frames UNSUPPORTED (see Unsupported).
package triggers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Peer is one worker connection as the registry sees it.
type Peer interface {
	// ID is the engine's worker id of the connection.
	ID() string
	// WorkerName is the name the worker registered with ("" before it did).
	WorkerName() string
	// Send queues a frame for the worker without waiting.
	Send(m *protocol.Message) error
}

// Gated is implemented by a Peer that holds a session of a gated listener (an RBAC session).
type Gated interface{ Gated() bool }

// gated reports whether p is a Gated peer with a session.
func gated(p Peer) bool {
	g, ok := p.(Gated)
	return ok && g.Gated()
}

// Status is where a trigger stands.
type Status string

// Trigger states.
const (
	// Parked: no provider serves the trigger's type; it is sent when one registers.
	Parked Status = "parked"
	// Pending: sent to the provider, which has not answered yet.
	Pending Status = "pending"
	// Active: the provider accepted it.
	Active Status = "active"
	// Failed: the provider refused it; it stays parked and is sent again to the next
	// provider of its type.
	Failed Status = "failed"
)

// typeEntry is one registered trigger type.
type typeEntry struct {
	ns        string
	frame     *protocol.Message
	provider  Peer
	displaced []*typeEntry // earlier providers this one took over from, the latest last
}

// trigger is one registered trigger.
type trigger struct {
	ns       string            // namespace of the worker that registered it: where function_id resolves
	frame    *protocol.Message // as sent to the provider: its id is the trigger's key
	owner    Peer
	ownerID  string // the id the owner registered it under (the key, unless a twin took it over)
	twins    []twin // identical registrations of other workers, first in line first
	provider Peer   // the provider it was sent to; nil while parked
	status   Status
	lastErr  *protocol.Error
}

// twin is a worker's registration of a trigger identical to one another worker owns.
type twin struct {
	owner Peer
	id    string
}

type typeKey struct{ ns, id string }

// Registry holds trigger types and triggers. It is safe for concurrent use. Frames are sent
// outside its lock, in the order the registry decided them.
type Registry struct {
	log *slog.Logger

	mu       sync.Mutex
	types    map[typeKey]*typeEntry
	triggers map[string]*trigger // by trigger id (client-chosen, a UUID)
}

// New returns an empty registry.
func New(log *slog.Logger) *Registry {
	if log == nil {
		log = slog.Default()
	}
	return &Registry{log: log, types: map[typeKey]*typeEntry{}, triggers: map[string]*trigger{}}
}

// outbox collects frames to send once the lock is released.
type outbox []struct {
	to Peer
	m  *protocol.Message
}

func (o *outbox) add(to Peer, m *protocol.Message) {
	*o = append(*o, struct {
		to Peer
		m  *protocol.Message
	}{to, m})
}

func (o outbox) flush() {
	for _, f := range o {
		_ = f.to.Send(f.m)
	}
}

// Handle applies one trigger frame from peer, registered in namespace ns. It reports false for
// frames that are not trigger frames.
func (r *Registry) Handle(p Peer, ns string, m *protocol.Message) bool {
	var out outbox
	r.mu.Lock()
	switch m.Type {
	case protocol.TypeRegisterTriggerType:
		r.registerType(&out, p, ns, m)
	case protocol.TypeUnregisterTriggerType:
		r.unregisterType(&out, p, ns, m.ID)
	case protocol.TypeRegisterTrigger:
		r.registerTrigger(&out, p, ns, m)
	case protocol.TypeUnregisterTrigger:
		r.unregisterTrigger(&out, p, m.ID)
	case protocol.TypeTriggerRegistrationResult:
		r.result(&out, p, m)
	default:
		r.mu.Unlock()
		return false
	}
	r.mu.Unlock()
	out.flush()
	return true
}

func (r *Registry) registerType(out *outbox, p Peer, ns string, m *protocol.Message) {
	if m.ID == "" {
		r.log.Warn("ignoring a registertriggertype without id", "worker_id", p.ID())
		return
	}
	k := typeKey{ns, m.ID}
	te := &typeEntry{ns: ns, frame: m, provider: p}
	if old := r.types[k]; old != nil && old.provider != p {
		if gated(p) && !gated(old.provider) {
			r.log.Warn("trigger type registration refused", "code", errcode.Forbidden, "trigger_type", m.ID, "namespace", ns, "worker_id", p.ID(),
				"reason", "a session of a gated listener may not take over a trigger type a trusted worker ("+old.provider.ID()+") provides")
			return
		}
		r.log.Info("trigger type changes provider", "trigger_type", m.ID, "namespace", ns, "from", old.provider.ID(), "to", p.ID())
		r.withdraw(out, old.provider, ns, m.ID)
		old.displaced = slices.DeleteFunc(old.displaced, func(d *typeEntry) bool { return d.provider == p })
		te.displaced = append(old.displaced, old)
		old.displaced = nil
	} else if old != nil {
		te.displaced = old.displaced // the same provider again: its frame is the newer one
	}
	r.types[k] = te
	r.sendParked(out, k)
}

// sendParked sends the type of key k the triggers parked for it.
func (r *Registry) sendParked(out *outbox, k typeKey) {
	te := r.types[k]
	for _, id := range r.sortedIDs() {
		t := r.triggers[id]
		if t.provider == nil && r.providerFor(t) == te {
			r.send(out, t, te.provider)
		}
	}
}

// restore makes the latest provider te displaced the type's provider again, when there is
// one, once te's provider left or unregistered the type; it reports whether it did. The
// triggers parked for the type go to it (the caller sends them).
func (r *Registry) restore(k typeKey, te *typeEntry) bool {
	if len(te.displaced) == 0 {
		delete(r.types, k)
		return false
	}
	prev := te.displaced[len(te.displaced)-1]
	prev.displaced = te.displaced[:len(te.displaced)-1]
	r.types[k] = prev
	r.log.Info("trigger type back with its earlier provider", "trigger_type", k.id, "namespace", k.ns, "from", te.provider.ID(), "to", prev.provider.ID())
	return true
}

// withdraw parks every trigger sent to provider for type id in ns, telling the provider.
func (r *Registry) withdraw(out *outbox, provider Peer, ns, id string) {
	for _, tid := range r.sortedIDs() {
		t := r.triggers[tid]
		if t.provider == provider && t.frame.TriggerType == id {
			out.add(provider, unregisterFrame(t))
			t.provider, t.status = nil, Parked
		}
	}
}

func (r *Registry) unregisterType(out *outbox, p Peer, ns, id string) {
	k := typeKey{ns, id}
	if te := r.types[k]; te != nil && te.provider == p {
		r.withdraw(out, p, ns, id)
		if r.restore(k, te) {
			r.sendParked(out, k)
		}
		return
	}
	if te := r.types[k]; te != nil { // a displaced provider withdraws: it is not restored later
		te.displaced = slices.DeleteFunc(te.displaced, func(d *typeEntry) bool { return d.provider == p })
	}
}

func (r *Registry) registerTrigger(out *outbox, p Peer, ns string, m *protocol.Message) {
	if m.ID == "" || m.TriggerType == "" || m.FunctionID == "" {
		out.add(p, resultFrame(m, protocol.NewError(errcode.TriggerRegistrationFailed,
			"registertrigger needs id, trigger_type and function_id (got id %q, trigger_type %q, function_id %q)", m.ID, m.TriggerType, m.FunctionID)))
		return
	}
	if t, i := r.find(p, m.ID); t != nil { // a registration again: it replaces the earlier one
		if i < 0 {
			r.release(out, t)
		} else {
			t.twins = slices.Delete(t.twins, i, i+1)
		}
	}
	if t := r.identical(p, ns, m); t != nil {
		t.twins = append(t.twins, twin{owner: p, id: m.ID})
		r.log.Debug("trigger registered again by another worker: a twin, not a second trigger", "trigger_id", t.frame.ID, "twin_id", m.ID, "worker_id", p.ID())
		if t.status == Failed {
			out.add(p, resultFrame(m, t.lastErr))
		}
		return
	}
	if r.triggers[m.ID] != nil {
		out.add(p, resultFrame(m, protocol.NewError(errcode.TriggerRegistrationFailed,
			"trigger id %s is already registered by another worker; use a fresh id", m.ID)))
		return
	}
	fwd := *m
	fwd.Namespace = &ns
	t := &trigger{ns: ns, frame: &fwd, owner: p, ownerID: m.ID, status: Parked}
	r.triggers[m.ID] = t
	if te := r.providerFor(t); te != nil {
		r.send(out, t, te.provider)
	}
}

// providerFor is the trigger type serving t: in t's namespace, else in default.
func (r *Registry) providerFor(t *trigger) *typeEntry {
	if te := r.types[typeKey{t.ns, t.frame.TriggerType}]; te != nil {
		return te
	}
	return r.types[typeKey{protocol.DefaultNamespace, t.frame.TriggerType}]
}

func (r *Registry) send(out *outbox, t *trigger, provider Peer) {
	t.provider, t.status = provider, Pending
	out.add(provider, t.frame)
}

// drop forgets t, telling its provider.
func (r *Registry) drop(out *outbox, t *trigger) {
	delete(r.triggers, t.frame.ID)
	if t.provider != nil {
		out.add(t.provider, unregisterFrame(t))
	}
}

func (r *Registry) unregisterTrigger(out *outbox, p Peer, id string) {
	t, i := r.find(p, id)
	switch {
	case t == nil:
	case i < 0:
		r.release(out, t)
	default:
		t.twins = slices.Delete(t.twins, i, i+1)
	}
}

// find is the trigger p registered under id: as its owner (i < 0) or as its twin number i.
func (r *Registry) find(p Peer, id string) (t *trigger, i int) {
	if t := r.triggers[id]; t != nil && t.owner == p && t.ownerID == id {
		return t, -1
	}
	for _, t := range r.triggers {
		if t.owner == p && t.ownerID == id {
			return t, -1
		}
		for i, tw := range t.twins {
			if tw.owner == p && tw.id == id {
				return t, i
			}
		}
	}
	return nil, 0
}

// identical is the trigger of another worker that m, from p in ns, duplicates: same trigger
// type, function and config (compared as JSON values), p neither its owner nor a twin yet.
func (r *Registry) identical(p Peer, ns string, m *protocol.Message) *trigger {
	for _, id := range r.sortedIDs() {
		t := r.triggers[id]
		if t.ns != ns || t.owner == p || t.frame.TriggerType != m.TriggerType || t.frame.FunctionID != m.FunctionID ||
			!sameJSON(t.frame.Config, m.Config) || slices.ContainsFunc(t.twins, func(tw twin) bool { return tw.owner == p }) {
			continue
		}
		return t
	}
	return nil
}

// release ends the owner's hold on t: its first twin takes it over (the provider keeps it, so
// no event is lost or doubled), or t goes.
func (r *Registry) release(out *outbox, t *trigger) {
	if len(t.twins) == 0 {
		r.drop(out, t)
		return
	}
	next := t.twins[0]
	t.twins = t.twins[1:]
	r.log.Info("trigger taken over by a twin", "trigger_id", t.frame.ID, "from", t.owner.ID(), "to", next.owner.ID())
	t.owner, t.ownerID = next.owner, next.id
}

// sameJSON reports whether a and b are the same JSON value (absent counts as null).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if len(bytes.TrimSpace(a)) == 0 {
		a = json.RawMessage("null")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		b = json.RawMessage("null")
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func (r *Registry) result(out *outbox, p Peer, m *protocol.Message) {
	t := r.triggers[m.ID]
	if t == nil || t.provider != p {
		r.log.Debug("ignoring a triggerregistrationresult not from the trigger's provider", "worker_id", p.ID(), "trigger_id", m.ID)
		return
	}
	if m.Error == nil {
		t.status, t.lastErr = Active, nil
		return
	}
	t.provider, t.status, t.lastErr = nil, Failed, m.Error
	r.log.Info("trigger refused by its provider", "trigger_id", m.ID, "trigger_type", t.frame.TriggerType, "function_id", t.frame.FunctionID, "code", m.Error.Code)
	out.add(t.owner, resultFrame(t.frame, m.Error))
}

// Revoke ends owner p's hold on trigger id (the registry's key, as Triggers lists it) because it
// may no longer have it, telling p with a triggerregistrationresult carrying perr: a twin of
// another worker takes the trigger over, or the trigger goes and its provider is told. It
// reports whether p owned id.
func (r *Registry) Revoke(p Peer, id string, perr *protocol.Error) bool {
	var out outbox
	r.mu.Lock()
	t := r.triggers[id]
	if t == nil || t.owner != p {
		r.mu.Unlock()
		return false
	}
	out.add(p, resultFrame(&protocol.Message{ID: t.ownerID, TriggerType: t.frame.TriggerType, FunctionID: t.frame.FunctionID}, perr))
	r.release(&out, t)
	r.mu.Unlock()
	out.flush()
	return true
}

// PeerGone forgets what peer owned: its trigger types (the provider it displaced, if any and
// still there, provides them again; else their triggers are parked until another provider
// registers) and its triggers (their providers are told).
func (r *Registry) PeerGone(p Peer) {
	var out outbox
	r.mu.Lock()
	for k, te := range r.types {
		te.displaced = slices.DeleteFunc(te.displaced, func(d *typeEntry) bool { return d.provider == p })
		if te.provider == p {
			r.restore(k, te)
		}
	}
	for _, id := range r.sortedIDs() {
		t := r.triggers[id]
		t.twins = slices.DeleteFunc(t.twins, func(tw twin) bool { return tw.owner == p })
		if t.owner == p {
			if len(t.twins) > 0 {
				r.release(&out, t)
			} else {
				delete(r.triggers, id)
				if t.provider != nil && t.provider != p {
					out.add(t.provider, unregisterFrame(t))
				}
				continue
			}
		}
		if t.provider == p {
			t.provider, t.status = nil, Parked
		}
	}
	// A type another worker still provides takes the triggers p served.
	for _, id := range r.sortedIDs() {
		t := r.triggers[id]
		if t.provider == nil && t.status == Parked {
			if te := r.providerFor(t); te != nil {
				r.send(&out, t, te.provider)
			}
		}
	}
	r.mu.Unlock()
	out.flush()
}

func (r *Registry) sortedIDs() []string {
	return slices.Sorted(maps.Keys(r.triggers))
}

func unregisterFrame(t *trigger) *protocol.Message {
	return &protocol.Message{Type: protocol.TypeUnregisterTrigger, ID: t.frame.ID, TriggerType: t.frame.TriggerType,
		FunctionID: t.frame.FunctionID, Config: t.frame.Config, Metadata: t.frame.Metadata, Namespace: t.frame.Namespace}
}

func resultFrame(m *protocol.Message, perr *protocol.Error) *protocol.Message {
	return &protocol.Message{Type: protocol.TypeTriggerRegistrationResult, ID: m.ID, TriggerType: m.TriggerType,
		FunctionID: m.FunctionID, Error: perr}
}

// TypeInfo is one row of engine::triggers::list.
type TypeInfo struct {
	ID                   string          `json:"id"`
	Description          string          `json:"description"`
	Namespace            string          `json:"namespace"`
	WorkerID             string          `json:"worker_id"`
	WorkerName           string          `json:"worker_name"`
	TriggerRequestFormat json.RawMessage `json:"trigger_request_format,omitempty"`
	CallRequestFormat    json.RawMessage `json:"call_request_format,omitempty"`
	InstanceCount        int             `json:"instance_count"`
}

// TriggerInfo is one row of engine::registered-triggers::list: iii's row (id, trigger_type,
// function_id, worker_name, status, config, config_summary) and this engine's extras.
type TriggerInfo struct {
	ID          string `json:"id"`
	TriggerType string `json:"trigger_type"`
	FunctionID  string `json:"function_id"`
	Namespace   string `json:"namespace"`
	WorkerID    string `json:"worker_id"` // the worker that registered the trigger
	// WorkerName is the worker that owns the trigger's function, as iii names it; the registry
	// sets the registering worker's name; the engine (core) replaces it with the function's owner.
	WorkerName    string          `json:"worker_name"`
	Config        json.RawMessage `json:"config"`
	ConfigSummary string          `json:"config_summary"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
	Status        Status          `json:"status"`
	ProviderID    string          `json:"provider_worker_id,omitempty"`
	Error         *protocol.Error `json:"error,omitempty"`
}

// Types lists the registered trigger types, by namespace then id.
func (r *Registry) Types() []TypeInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []TypeInfo{}
	for k, te := range r.types {
		n := 0
		for _, t := range r.triggers {
			if t.provider == te.provider && t.frame.TriggerType == k.id {
				n++
			}
		}
		out = append(out, TypeInfo{ID: k.id, Description: te.frame.Description, Namespace: k.ns, WorkerID: te.provider.ID(),
			WorkerName: te.provider.WorkerName(), TriggerRequestFormat: te.frame.TriggerRequestFormat,
			CallRequestFormat: te.frame.CallRequestFormat, InstanceCount: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Filter selects rows of Triggers; empty fields match everything. Without IncludePending or
// IncludeRefused only active triggers are listed, as iii lists them.
type Filter struct {
	TriggerType string `json:"trigger_type"`
	FunctionID  string `json:"function_id"`
	// IncludePending (iii's include_pending) adds the triggers not accepted yet: parked (no
	// provider) and pending (sent, unanswered).
	IncludePending bool `json:"include_pending"`
	// IncludeRefused adds, beside those, the triggers their provider refused (failed, with
	// the error): every registered trigger, this engine's status view.
	IncludeRefused bool `json:"include_refused"`
}

// shows reports whether f lists a trigger of status st.
func (f Filter) shows(st Status) bool {
	switch st {
	case Active:
		return true
	case Parked, Pending:
		return f.IncludePending || f.IncludeRefused
	}
	return f.IncludeRefused
}

// SummaryMax is how many characters of its config's JSON a row's config_summary keeps, as iii.
const SummaryMax = 80

// ConfigSummary is iii's config_summary: the config as compact JSON, cut to SummaryMax
// characters followed by "…" when longer.
func ConfigSummary(cfg json.RawMessage) string {
	var b bytes.Buffer
	if len(cfg) == 0 || json.Compact(&b, cfg) != nil {
		b.Reset()
		b.WriteString("null")
	}
	s := b.String()
	if utf8.RuneCountInString(s) <= SummaryMax {
		return s
	}
	n := 0
	for i := range s {
		if n == SummaryMax {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// Triggers lists the registered triggers matching f, by id.
func (r *Registry) Triggers(f Filter) []TriggerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []TriggerInfo{}
	for _, id := range r.sortedIDs() {
		t := r.triggers[id]
		if f.TriggerType != "" && f.TriggerType != t.frame.TriggerType || f.FunctionID != "" && f.FunctionID != t.frame.FunctionID || !f.shows(t.status) {
			continue
		}
		cfg := t.frame.Config
		if len(cfg) == 0 {
			cfg = json.RawMessage("null")
		}
		ti := TriggerInfo{ID: id, TriggerType: t.frame.TriggerType, FunctionID: t.frame.FunctionID, Namespace: t.ns,
			WorkerID: t.owner.ID(), WorkerName: t.owner.WorkerName(), Config: cfg, ConfigSummary: ConfigSummary(cfg), Metadata: t.frame.Metadata,
			Status: t.status, Error: t.lastErr}
		if t.provider != nil {
			ti.ProviderID = t.provider.ID()
		}
		out = append(out, ti)
	}
	return out
}

// Unsupported answers a 0.26 observe or unobserve frame: an observeresult with the frame's id
// and an UNSUPPORTED error, the failure 0.25 SDKs report against an engine without the observe
// feature. The engine sends it rather than dropping the frame, so an
// SDK never waits on an observer that will not come.
func Unsupported(m *protocol.Message) *protocol.Message {
	return &protocol.Message{Type: protocol.TypeObserveResult, ID: m.ID, Error: protocol.NewError(errcode.Unsupported,
		"this engine does not support %s (it advertises no observe feature); register a trigger (registertrigger) instead", m.Type)}
}
