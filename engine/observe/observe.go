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
	// DefaultTargetTimeout bounds one target call when the observer names no timeout_ms: a
	// delivery holds its payload until the target answers, so a slow target must not keep it
	// for a whole call timeout.
	DefaultTargetTimeout = 30 * time.Second
	// MaxTargetTimeout is the largest timeout_ms accepted.
	MaxTargetTimeout = 10 * time.Minute
)

// Default bounds of a Registry (Limits' zero fields). Each observer of a call copies the call's
// input and output into its target's payload, so without them one connection could make the
// engine hold observers × calls × payload bytes.
const (
	DefaultPerOwner = 64   // observers one connection may hold
	DefaultTotal    = 4096 // observers the engine holds
	// DefaultOwnerBytes bounds the payload bytes of one connection's target calls in flight:
	// less than a connection's write queue (16 MiB), so that one owner's fan-out of a large
	// call does not close the target's worker as a slow consumer.
	DefaultOwnerBytes = 8 << 20
	DefaultTotalBytes = 256 << 20 // payload bytes of all target calls in flight
)

// Limits bound a Registry; a zero field takes its default.
type Limits struct {
	PerOwner   int   // observers one owner may hold; one more is ErrOwnerLimit
	Total      int   // observers in all; one more is ErrTotalLimit
	Restricted int   // Restricted observers in all (default three quarters of Total); one more is ErrRestrictedLimit
	OwnerBytes int64 // payload bytes of one owner's deliveries not yet Done; past it a fire is dropped
	TotalBytes int64 // the same for every owner together
}

func (l Limits) withDefaults() Limits {
	if l.PerOwner <= 0 {
		l.PerOwner = DefaultPerOwner
	}
	if l.Total <= 0 {
		l.Total = DefaultTotal
	}
	if l.Restricted <= 0 {
		l.Restricted = max(1, l.Total*3/4)
	}
	if l.OwnerBytes <= 0 {
		l.OwnerBytes = DefaultOwnerBytes
	}
	if l.TotalBytes <= 0 {
		l.TotalBytes = DefaultTotalBytes
	}
	return l
}

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
		TimeoutMS   int64           `json:"timeout_ms,omitempty"`
		Metadata    json.RawMessage `json:"metadata,omitempty"`
	} `json:"options"`
}

// Observer is one registered observer. Its counters are safe to read at any time.
type Observer struct {
	ID    string
	Owner string // the worker id of the connection that added it
	// Restricted marks an observer of a session of a gated listener: all of them together hold
	// at most Limits.Restricted observers, so that the rest stays for trusted workers.
	Restricted bool
	Function   string // the source
	Namespace  string
	Target     Target
	Created    time.Time

	filter      Filter
	filtersRaw  json.RawMessage
	capture     []string
	deliver     string // envelope, input or output
	on          string // success, error or complete
	maxFires    int64  // 0: no bound
	expires     time.Time
	maxInFlight int32
	timeout     time.Duration // of one target call
	metadata    json.RawMessage

	fires, errs, dropped atomic.Int64
	inflight             atomic.Int32
	owner                *ownerState // set by Registry.Add
}

// Timeout bounds one call of o's target: options.timeout_ms, else DefaultTargetTimeout.
func (o *Observer) Timeout() time.Duration { return o.timeout }

// ownerState is what a Registry counts for one owner: its observers and the payload bytes of
// its deliveries in flight.
type ownerState struct {
	count int // guarded by Registry.mu
	bytes atomic.Int64
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
		capture: DefaultCapture, deliver: "envelope", on: "success", maxInFlight: DefaultMaxInFlight, timeout: DefaultTargetTimeout,
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
		return nil, fmt.Errorf("source.filters: %w", err)
	}
	o.filter = f
	switch opt := r.Options; {
	case opt.MaxFires < 0:
		return nil, errors.New("options.max_fires must not be negative")
	case opt.ExpiresInMS < 0:
		return nil, errors.New("options.expires_in_ms must not be negative")
	case opt.MaxInFlight < 0 || opt.MaxInFlight > MaxMaxInFlight:
		return nil, fmt.Errorf("options.max_in_flight must be between 1 and %d", MaxMaxInFlight)
	case opt.TimeoutMS < 0 || opt.TimeoutMS > MaxTargetTimeout.Milliseconds():
		return nil, fmt.Errorf("options.timeout_ms must be between 1 and %d", MaxTargetTimeout.Milliseconds())
	default:
		if opt.TimeoutMS > 0 {
			o.timeout = time.Duration(opt.TimeoutMS) * time.Millisecond
		}
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

// Delivery is one run of an observer's target that a call fired. Its payload is built only
// when asked for (Payload), from parts the call's deliveries share: the call's input, output
// and envelope are encoded once per call, not once per observer. Done must be called once the
// target answered.
type Delivery struct {
	Observer *Observer
	head     []byte // the observer's own start of the envelope, nil for deliver input/output
	body     []byte // shared by the call's deliveries; never written to
	tail     []byte // the observer's own end of the envelope
	size     int64  // the payload's length, held in the owner's and the registry's budgets
	reg      *Registry
}

// Payload is the target's payload. For deliver input or output it is the call's copy that
// every such delivery shares: it must not be written to.
func (d Delivery) Payload() json.RawMessage {
	if d.head == nil && d.tail == nil {
		return d.body
	}
	out := make([]byte, 0, d.size)
	out = append(out, d.head...)
	out = append(out, d.body...)
	return append(out, d.tail...)
}

// Done records the target's outcome (failed true for an error) and gives back the payload's
// bytes.
func (d Delivery) Done(failed bool) {
	d.Observer.inflight.Add(-1)
	if failed {
		d.Observer.errs.Add(1)
	}
	if d.reg != nil {
		d.reg.give(d.Observer, d.size)
	}
}

// Registry holds the observers of an engine. Its methods are safe for concurrent use; Of and
// Match cost one atomic load while no observer exists.
type Registry struct {
	limits     Limits
	mu         sync.RWMutex
	byFn       map[key][]*Observer
	byID       map[string]*Observer
	owners     map[string]*ownerState
	restricted int // Restricted observers held (mu)
	count      atomic.Int32
	bytes      atomic.Int64 // payload bytes of every delivery in flight
}

type key struct{ ns, fn string }

// NewRegistry returns an empty registry bounded by l.
func NewRegistry(l Limits) *Registry {
	return &Registry{limits: l.withDefaults(), byFn: map[key][]*Observer{}, byID: map[string]*Observer{}, owners: map[string]*ownerState{}}
}

// Limits are r's bounds, defaults filled in.
func (r *Registry) Limits() Limits { return r.limits }

// Errors of Add.
var (
	// ErrIDTaken: the id is held by another owner's observer.
	ErrIDTaken = errors.New("observer id taken")
	// ErrOwnerLimit: the owner holds Limits.PerOwner observers.
	ErrOwnerLimit = errors.New("too many observers for one connection")
	// ErrTotalLimit: the registry holds Limits.Total observers.
	ErrTotalLimit = errors.New("too many observers in the engine")
	// ErrRestrictedLimit: the registry holds Limits.Restricted Restricted observers.
	ErrRestrictedLimit = errors.New("too many observers of gated sessions")
)

// Add registers o. An observer of the same id and owner is replaced (a worker re-adding its
// observers after a reconnect keeps their ids); an id another owner holds is ErrIDTaken. A new
// observer past the owner's or the registry's bound is ErrOwnerLimit or ErrTotalLimit, and a
// Restricted one past the Restricted bound ErrRestrictedLimit.
func (r *Registry) Add(o *Observer) (replaced bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.byID[o.ID]
	if old != nil && old.Owner != o.Owner {
		return false, ErrIDTaken
	}
	st := r.owners[o.Owner]
	if old == nil {
		if st != nil && st.count >= r.limits.PerOwner {
			return false, ErrOwnerLimit
		}
		if len(r.byID) >= r.limits.Total {
			return false, ErrTotalLimit
		}
	}
	if o.Restricted && (old == nil || !old.Restricted) && r.restricted >= r.limits.Restricted {
		return false, ErrRestrictedLimit
	}
	if old != nil {
		r.removeLocked(old)
		replaced = true
	}
	if st = r.owners[o.Owner]; st == nil {
		st = &ownerState{}
		r.owners[o.Owner] = st
	}
	st.count++
	if o.Restricted {
		r.restricted++
	}
	o.owner = st
	r.byID[o.ID] = o
	k := key{o.Namespace, o.Function}
	r.byFn[k] = append(r.byFn[k], o)
	r.count.Add(1)
	return replaced, nil
}

// take reserves n payload bytes for a delivery of o; it reports false when o's owner or the
// registry would then hold more than its bound. A delivery of an empty budget is always taken,
// so one payload larger than the bound still goes through alone.
func (r *Registry) take(o *Observer, n int64) bool {
	if o.owner == nil {
		return true
	}
	if used := o.owner.bytes.Add(n); used > r.limits.OwnerBytes && used != n {
		o.owner.bytes.Add(-n)
		return false
	}
	if used := r.bytes.Add(n); used > r.limits.TotalBytes && used != n {
		r.bytes.Add(-n)
		o.owner.bytes.Add(-n)
		return false
	}
	return true
}

func (r *Registry) give(o *Observer, n int64) {
	if o.owner == nil {
		return
	}
	o.owner.bytes.Add(-n)
	r.bytes.Add(-n)
}

// InFlightBytes is the payload bytes of the deliveries not yet Done.
func (r *Registry) InFlightBytes() int64 { return r.bytes.Load() }

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
	if o.Restricted {
		r.restricted--
	}
	if st := r.owners[o.Owner]; st != nil {
		if st.count--; st.count <= 0 {
			delete(r.owners, o.Owner)
		}
	}
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
// target calls running, or whose owner's deliveries in flight hold Limits.OwnerBytes (or all
// owners' Limits.TotalBytes), counts the fire as dropped instead.
func (r *Registry) Match(observers []*Observer, call Call, now time.Time, allow func(*Observer) bool) []Delivery {
	var (
		out []Delivery
		doc Doc
		enc encodings
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
		d := o.delivery(call, &enc)
		d.reg = r
		if !r.take(o, d.size) {
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
				r.give(o, d.size)
				continue
			}
		}
		out = append(out, d)
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

// envelopeBody is the part of the Observed payload a target receives by default that is the
// same for every observer of a call capturing the same parts. The whole envelope is
// {"observer_id", <the body's fields>, "observer_metadata"?}.
type envelopeBody struct {
	FunctionID string          `json:"function_id"`
	Namespace  string          `json:"namespace"`
	Input      json.RawMessage `json:"input,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      json.RawMessage `json:"error,omitempty"`
	Caller     *Caller         `json:"caller,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
}

// encodings are the parts of one call's payloads, each made once and shared by the observers
// of the call.
type encodings struct {
	input, output json.RawMessage
	in, out       bool
	bodies        map[string][]byte // envelope bodies by capture set, without their braces
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return append(json.RawMessage(nil), b...)
}

func (e *encodings) inputOf(c Call) json.RawMessage {
	if !e.in {
		e.input, e.in = orNull(c.Input), true
	}
	return e.input
}

func (e *encodings) outputOf(c Call) json.RawMessage {
	if !e.out {
		e.output, e.out = orNull(c.Output), true
	}
	return e.output
}

// body is the envelope body of c for the parts capture names, encoded once per capture set.
func (e *encodings) body(c Call, capture []string) []byte {
	k := strings.Join(capture, ",")
	if b, ok := e.bodies[k]; ok {
		return b
	}
	eb := envelopeBody{FunctionID: c.FunctionID, Namespace: c.Namespace, Error: c.Error}
	for _, part := range capture {
		switch part {
		case "input":
			eb.Input = e.inputOf(c)
		case "output":
			if c.Error == nil {
				eb.Output = e.outputOf(c)
			}
		case "caller":
			cl := c.Caller
			eb.Caller = &cl
		case "metadata":
			eb.Metadata = c.Metadata
		}
	}
	b, _ := json.Marshal(eb)
	b = b[1 : len(b)-1] // function_id is always there: never empty
	if e.bodies == nil {
		e.bodies = map[string][]byte{}
	}
	e.bodies[k] = b
	return b
}

// delivery is o's delivery of c, its shared parts taken from (or added to) enc.
func (o *Observer) delivery(c Call, enc *encodings) Delivery {
	d := Delivery{Observer: o}
	switch o.deliver {
	case "input":
		d.body = enc.inputOf(c)
	case "output":
		d.body = enc.outputOf(c)
	default:
		id, _ := json.Marshal(o.ID)
		d.head = append(append([]byte(`{"observer_id":`), id...), ',')
		d.body = enc.body(c, o.capture)
		d.tail = []byte("}")
		if len(o.metadata) > 0 {
			if m, err := json.Marshal(o.metadata); err == nil {
				d.tail = append(append([]byte(`,"observer_metadata":`), m...), '}')
			}
		}
	}
	d.size = int64(len(d.head) + len(d.body) + len(d.tail))
	return d
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
	TimeoutMS  int64           `json:"timeout_ms"`
}

// Row is o's row; status is "active", or "pending" while its target is not registered, and
// ownerName the owner's worker name now.
func (o *Observer) Row(status, ownerName string) Row {
	r := Row{ID: o.ID, Owner: o.Owner, OwnerName: ownerName, Source: Target{o.Function, o.Namespace}, Target: o.Target,
		Status: status, Filters: o.filtersRaw, Capture: o.capture, Deliver: o.deliver, On: o.on, MaxFires: o.maxFires,
		Fires: o.fires.Load(), Errors: o.errs.Load(), Dropped: o.dropped.Load(), InFlight: o.inflight.Load(),
		CreatedAt: o.Created.UnixMilli(), Metadata: o.metadata, MaxPending: o.maxInFlight, TimeoutMS: o.timeout.Milliseconds()}
	if !o.expires.IsZero() {
		r.ExpiresAt = o.expires.UnixMilli()
	}
	if r.Capture == nil {
		r.Capture = []string{}
	}
	return r
}
