package observe

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Captures are the parts of a call an observer may capture, and the default capture.
var (
	Captures       = []string{"input", "output", "caller", "metadata"}
	DefaultCapture = []string{"input", "output", "caller"}
)

// Defaults and bounds of an observer's options.
const (
	DefaultMaxInFlight = 64   // target calls of one observer running at once; more are dropped
	MaxMaxInFlight     = 4096 // the largest max_in_flight accepted
)

// Target names the function an observer runs.
type Target struct {
	FunctionID string `json:"function_id"`
	Namespace  string `json:"namespace,omitempty"`
}

// UnmarshalJSON reads a target written as a function id or as {function_id, namespace}.
func (t *Target) UnmarshalJSON(b []byte) error {
	var id string
	if json.Unmarshal(b, &id) == nil {
		*t = Target{FunctionID: id}
		return nil
	}
	type plain Target
	return json.Unmarshal(b, (*plain)(t))
}

// Request is the payload of engine::observers::add.
type Request struct {
	Source struct {
		FunctionID string          `json:"function_id"`
		Namespace  string          `json:"namespace,omitempty"`
		Args       json.RawMessage `json:"args,omitempty"`
		Filters    json.RawMessage `json:"filters,omitempty"`
		Capture    *[]string       `json:"capture,omitempty"`
		Deliver    string          `json:"deliver,omitempty"`
		On         string          `json:"on,omitempty"`
	} `json:"source"`
	Target  Target `json:"target"`
	Options struct {
		ID          string          `json:"id,omitempty"`
		MaxFires    int64           `json:"max_fires,omitempty"`
		ExpiresInMS int64           `json:"expires_in_ms,omitempty"`
		MaxInFlight int             `json:"max_in_flight,omitempty"`
		Metadata    json.RawMessage `json:"metadata,omitempty"`
	} `json:"options"`
}

// Observer is one registered observer. Its counters are safe to read at any time.
type Observer struct {
	ID        string
	Owner     string // the worker id of the connection that added it
	Function  string // the source
	Namespace string
	Target    Target
	Created   time.Time

	filter      Filter
	filtersRaw  json.RawMessage
	capture     []string
	deliver     string // envelope, input or output
	on          string // success, error or complete
	maxFires    int64  // 0: no bound
	expires     time.Time
	maxInFlight int32
	metadata    json.RawMessage

	fires, errs, dropped atomic.Int64
	inflight             atomic.Int32
}

// New checks r and returns the observer it describes. ns is the source's namespace and
// targetNS the target's when r names none; id is used when r names no id. The error says which
// field is wrong and why; it is never a partial observer.
func New(r Request, id, ns, targetNS string, now time.Time) (*Observer, error) {
	s := r.Source
	if s.FunctionID == "" {
		return nil, errors.New("source.function_id is required")
	}
	if r.Target.FunctionID == "" {
		return nil, errors.New("target is required: a function id, or {function_id, namespace}")
	}
	if len(s.Args) > 0 && string(s.Args) != "null" {
		return nil, errors.New("source.args are for functions whose worker routes events itself (owner delivery); " +
			"this engine observes the calls it routes, so args would be ignored: use source.filters")
	}
	o := &Observer{ID: id, Function: s.FunctionID, Namespace: ns, Target: r.Target, Created: now,
		capture: DefaultCapture, deliver: "envelope", on: "success", maxInFlight: DefaultMaxInFlight,
		metadata: r.Options.Metadata, filtersRaw: s.Filters}
	if s.Namespace != "" {
		o.Namespace = s.Namespace
	}
	if o.Target.Namespace == "" {
		o.Target.Namespace = targetNS
	}
	if o.Target.FunctionID == o.Function && o.Target.Namespace == o.Namespace {
		return nil, fmt.Errorf("target %s is the function the observer watches: each call would run it again", o.Function)
	}
	if r.Options.ID != "" {
		o.ID = r.Options.ID
	}
	if s.Capture != nil {
		for _, c := range *s.Capture {
			if !slices.Contains(Captures, c) {
				return nil, fmt.Errorf("source.capture: unknown part %q (known: %s)", c, strings.Join(Captures, ", "))
			}
		}
		o.capture = *s.Capture
	}
	switch s.Deliver {
	case "", "envelope":
	case "input", "output":
		o.deliver = s.Deliver
	default:
		return nil, fmt.Errorf("source.deliver: %q is not envelope, input or output", s.Deliver)
	}
	switch s.On {
	case "", "success":
	case "error", "complete":
		o.on = s.On
	default:
		return nil, fmt.Errorf("source.on: %q is not success, error or complete", s.On)
	}
	f, err := ParseFilter(s.Filters)
	if err != nil {
		return nil, fmt.Errorf("source.filters: %v", err)
	}
	o.filter = f
	switch opt := r.Options; {
	case opt.MaxFires < 0:
		return nil, errors.New("options.max_fires must not be negative")
	case opt.ExpiresInMS < 0:
		return nil, errors.New("options.expires_in_ms must not be negative")
	case opt.MaxInFlight < 0 || opt.MaxInFlight > MaxMaxInFlight:
		return nil, fmt.Errorf("options.max_in_flight must be between 1 and %d", MaxMaxInFlight)
	default:
		o.maxFires = opt.MaxFires
		if opt.ExpiresInMS > 0 {
			o.expires = now.Add(time.Duration(opt.ExpiresInMS) * time.Millisecond)
		}
		if opt.MaxInFlight > 0 {
			o.maxInFlight = int32(opt.MaxInFlight)
		}
	}
	return o, nil
}

// Caller is who made an observed call.
type Caller struct {
	WorkerID   string `json:"worker_id"`
	WorkerName string `json:"worker_name,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
}

// Call is one routed call's outcome, as observers see it. Input, Output and Metadata must stay
// valid while Match runs; the payloads it returns own their bytes.
type Call struct {
	FunctionID string
	Namespace  string
	Input      json.RawMessage
	Output     json.RawMessage // nil on error
	Error      json.RawMessage // the error object; nil on success
	Metadata   json.RawMessage
	Caller     Caller
}

// Delivery is one run of an observer's target that a call fired. Done must be called once the
// target answered.
type Delivery struct {
	Observer *Observer
	Payload  json.RawMessage
}

// Done records the target's outcome (failed true for an error).
func (d Delivery) Done(failed bool) {
	d.Observer.inflight.Add(-1)
	if failed {
		d.Observer.errs.Add(1)
	}
}

// Registry holds the observers of an engine. Its methods are safe for concurrent use; Of and
// Match cost one atomic load while no observer exists.
type Registry struct {
	mu    sync.RWMutex
	byFn  map[key][]*Observer
	byID  map[string]*Observer
	count atomic.Int32
}

type key struct{ ns, fn string }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byFn: map[key][]*Observer{}, byID: map[string]*Observer{}}
}

// ErrIDTaken is returned by Add for an id another connection's observer holds.
var ErrIDTaken = errors.New("observer id taken")

// Add registers o. An observer of the same id and owner is replaced (a worker re-adding its
// observers after a reconnect keeps their ids); an id another owner holds is ErrIDTaken.
func (r *Registry) Add(o *Observer) (replaced bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.byID[o.ID]; old != nil {
		if old.Owner != o.Owner {
			return false, ErrIDTaken
		}
		r.removeLocked(old)
		replaced = true
	}
	r.byID[o.ID] = o
	k := key{o.Namespace, o.Function}
	r.byFn[k] = append(r.byFn[k], o)
	r.count.Add(1)
	return replaced, nil
}

// Get returns the observer id, nil when there is none.
func (r *Registry) Get(id string) *Observer {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byID[id]
}

// Remove drops observer o; it reports false when o was already gone.
func (r *Registry) Remove(o *Observer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[o.ID] != o {
		return false
	}
	r.removeLocked(o)
	return true
}

func (r *Registry) removeLocked(o *Observer) {
	delete(r.byID, o.ID)
	k := key{o.Namespace, o.Function}
	list := slices.DeleteFunc(slices.Clone(r.byFn[k]), func(x *Observer) bool { return x == o })
	if len(list) == 0 {
		delete(r.byFn, k)
	} else {
		r.byFn[k] = list
	}
	r.count.Add(-1)
}

// RemoveOwner drops every observer owner added and returns how many.
func (r *Registry) RemoveOwner(owner string) int {
	if r.count.Load() == 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.byID {
		if o.Owner == owner {
			r.removeLocked(o)
			n++
		}
	}
	return n
}

// Of returns the observers of fn in ns, nil when it has none.
func (r *Registry) Of(ns, fn string) []*Observer {
	if r.count.Load() == 0 {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byFn[key{ns, fn}]
}

// List returns every observer, by source namespace, function and id.
func (r *Registry) List() []*Observer {
	r.mu.RLock()
	out := make([]*Observer, 0, len(r.byID))
	for _, o := range r.byID {
		out = append(out, o)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Function != b.Function {
			return a.Function < b.Function
		}
		return a.ID < b.ID
	})
	return out
}

// Match returns the deliveries call fires among observers (those Of returned), each allowed by
// allow: an observer fires when its on matches the outcome and its filters match the call. An
// observer past its expiry, or that reached max_fires, is removed; one with max_in_flight
// target calls running counts the fire as dropped instead.
func (r *Registry) Match(observers []*Observer, call Call, now time.Time, allow func(*Observer) bool) []Delivery {
	var (
		out []Delivery
		doc Doc
	)
	failed := call.Error != nil
	for _, o := range observers {
		if !o.expires.IsZero() && now.After(o.expires) {
			r.Remove(o)
			continue
		}
		if (o.on == "success" && failed) || (o.on == "error" && !failed) {
			continue
		}
		if !o.filter.Empty() {
			if doc == nil {
				doc = call.doc()
			}
			if !o.filter.Matches(doc) {
				continue
			}
		}
		if allow != nil && !allow(o) {
			continue
		}
		if o.inflight.Add(1) > o.maxInFlight {
			o.inflight.Add(-1)
			o.dropped.Add(1)
			continue
		}
		n := o.fires.Add(1)
		if o.maxFires > 0 && n >= o.maxFires {
			r.Remove(o)
			if n > o.maxFires {
				o.fires.Add(-1)
				o.inflight.Add(-1)
				continue
			}
		}
		out = append(out, Delivery{Observer: o, Payload: o.payload(call)})
	}
	return out
}

func (c Call) doc() Doc {
	d := Doc{}
	put := func(root string, raw json.RawMessage) {
		if len(raw) == 0 {
			return
		}
		if v, err := decode(raw); err == nil {
			d[root] = v
		}
	}
	put("input", c.Input)
	put("output", c.Output)
	put("error", c.Error)
	put("metadata", c.Metadata)
	d["caller"] = map[string]any{"worker_id": c.Caller.WorkerID, "worker_name": c.Caller.WorkerName, "namespace": c.Caller.Namespace}
	return d
}

// envelope is the Observed payload a target receives by default.
type envelope struct {
	ObserverID       string          `json:"observer_id"`
	FunctionID       string          `json:"function_id"`
	Namespace        string          `json:"namespace"`
	Input            json.RawMessage `json:"input,omitempty"`
	Output           json.RawMessage `json:"output,omitempty"`
	Error            json.RawMessage `json:"error,omitempty"`
	Caller           *Caller         `json:"caller,omitempty"`
	Metadata         json.RawMessage `json:"metadata,omitempty"`
	ObserverMetadata json.RawMessage `json:"observer_metadata,omitempty"`
}

func (o *Observer) payload(c Call) json.RawMessage {
	orNull := func(b json.RawMessage) json.RawMessage {
		if len(b) == 0 {
			return json.RawMessage("null")
		}
		return append(json.RawMessage(nil), b...)
	}
	switch o.deliver {
	case "input":
		return orNull(c.Input)
	case "output":
		return orNull(c.Output)
	}
	e := envelope{ObserverID: o.ID, FunctionID: c.FunctionID, Namespace: c.Namespace, Error: c.Error, ObserverMetadata: o.metadata}
	for _, part := range o.capture {
		switch part {
		case "input":
			e.Input = orNull(c.Input)
		case "output":
			if c.Error == nil {
				e.Output = orNull(c.Output)
			}
		case "caller":
			cl := c.Caller
			e.Caller = &cl
		case "metadata":
			e.Metadata = c.Metadata
		}
	}
	b, _ := json.Marshal(e)
	return b
}

// Row is one observer as engine::observers::list shows it.
type Row struct {
	ID         string          `json:"id"`
	Owner      string          `json:"owner_worker_id"`
	OwnerName  string          `json:"owner_worker_name,omitempty"`
	Source     Target          `json:"source"`
	Target     Target          `json:"target"`
	Status     string          `json:"status"`
	Filters    json.RawMessage `json:"filters,omitempty"`
	Capture    []string        `json:"capture"`
	Deliver    string          `json:"deliver"`
	On         string          `json:"on"`
	MaxFires   int64           `json:"max_fires,omitempty"`
	ExpiresAt  int64           `json:"expires_at_ms,omitempty"`
	Fires      int64           `json:"fires"`
	Errors     int64           `json:"errors"`
	Dropped    int64           `json:"dropped"`
	InFlight   int32           `json:"in_flight"`
	CreatedAt  int64           `json:"created_at_ms"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	MaxPending int32           `json:"max_in_flight"`
}

// Row is o's row; status is "active", or "pending" while its target is not registered, and
// ownerName the owner's worker name now.
func (o *Observer) Row(status, ownerName string) Row {
	r := Row{ID: o.ID, Owner: o.Owner, OwnerName: ownerName, Source: Target{o.Function, o.Namespace}, Target: o.Target,
		Status: status, Filters: o.filtersRaw, Capture: o.capture, Deliver: o.deliver, On: o.on, MaxFires: o.maxFires,
		Fires: o.fires.Load(), Errors: o.errs.Load(), Dropped: o.dropped.Load(), InFlight: o.inflight.Load(),
		CreatedAt: o.Created.UnixMilli(), Metadata: o.metadata, MaxPending: o.maxInFlight}
	if !o.expires.IsZero() {
		r.ExpiresAt = o.expires.UnixMilli()
	}
	if r.Capture == nil {
		r.Capture = []string{}
	}
	return r
}
