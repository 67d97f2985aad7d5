// Package discovery is the engine's introspection beyond the lists of package core, as iii's
// iii-engine-functions worker has it:
//
//	engine::functions::info  {function_id | function_ids (at most 32), namespace?}
//	    -> {function_id, namespace, worker_name, description?, request_schema?, response_schema?, metadata?, registered_triggers: [{id, trigger_type, config}]}
//	    (function_ids: {functions: [detail | {function_id, error: "not_found"}]})
//	engine::workers::info    {name, namespace?}
//	    -> {worker: {name, description, version, id, namespace, runtime, os, status, function_count, connected_at_ms,
//	        active_invocations, isolation, ip_address, pid?, internal, latest_metrics?}, functions, trigger_types, registered_triggers}
//
// A bare function id or worker name resolves as iii's do: default when it is there, else the one
// namespace that has it; in several others it is ambiguous (NOT_FOUND naming them). The worker
// "engine" is the engine's built-in functions (status "available", runtime "engine").
// latest_metrics is the last report of the worker's SDK (CPU, memory, event loop; package
// observability) when it sent one.
//
// Trigger types, provided in default by the engine:
//
//	engine::functions-available  fires {event: "functions_changed", functions: [{function_id, namespace, worker_name, description?, metadata?}]}
//	                             after the function registry changed, a burst coalesced over 100 ms
//	engine::workers-available    fires {event: "worker_metadata_updated", worker_id} after engine::workers::register
package discovery

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/triggers"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Names of the functions and trigger types, as iii's.
const (
	FnFunctionInfo            = "engine::functions::info"
	FnWorkerInfo              = "engine::workers::info"
	TriggerFunctionsAvailable = "engine::functions-available"
	TriggerWorkersAvailable   = "engine::workers-available"

	// WorkerName is the provider of the trigger types, iii's name for the engine's functions.
	WorkerName = "iii-engine-functions"
	// BatchMax is the most function_ids one engine::functions::info takes.
	BatchMax = 32
	// Coalesce is how long a burst of registry changes is folded into one functions-available event.
	Coalesce = 100 * time.Millisecond
	// fireTimeout bounds one delivery of an event to a bound function.
	fireTimeout = 30 * time.Second
)

// MetricsSource gives the last metrics a worker's SDK reported; nil when it reported none.
type MetricsSource interface {
	WorkerMetrics(workerID string) any
}

// Discovery serves the functions and trigger types above. It implements the FunctionsChanged
// and WorkerRegistered parts of core.Observer.
type Discovery struct {
	e       *core.Engine
	metrics MetricsSource
	log     *slog.Logger
	peer    *peer

	scheduled atomic.Bool
}

// Install adds the functions and trigger types to e. metrics may be nil.
func Install(e *core.Engine, metrics MetricsSource, log *slog.Logger) *Discovery {
	if log == nil {
		log = slog.Default()
	}
	d := &Discovery{e: e, metrics: metrics, log: log}
	d.peer = &peer{d: d, triggers: map[string]bound{}}
	e.HandleInline(FnFunctionInfo, "Inspect functions: schemas, owner and registered triggers ({function_id} or {function_ids: [...]}, namespace?)", d.functionInfo)
	e.HandleInline(FnWorkerInfo, "Inspect one connected worker: functions, trigger types, registered triggers, latest metrics ({name, namespace?})", d.workerInfo)
	reg := e.Triggers()
	reg.Handle(d.peer, protocol.DefaultNamespace, &protocol.Message{Type: protocol.TypeRegisterTriggerType, ID: TriggerFunctionsAvailable,
		Description: "Triggered when functions are registered/unregistered"})
	reg.Handle(d.peer, protocol.DefaultNamespace, &protocol.Message{Type: protocol.TypeRegisterTriggerType, ID: TriggerWorkersAvailable,
		Description: "Triggered when workers connect/disconnect"})
	return d
}

// FunctionsChanged schedules one functions-available event for the changes of the next Coalesce.
func (d *Discovery) FunctionsChanged() {
	if !d.peer.has(TriggerFunctionsAvailable) || d.scheduled.Swap(true) {
		return
	}
	time.AfterFunc(Coalesce, func() {
		d.scheduled.Store(false) // a change from here on schedules its own event
		d.fire(TriggerFunctionsAvailable, func(b bound) any {
			return map[string]any{"event": "functions_changed", "functions": d.summaries(d.e.FunctionsForServer(b.ns, b.fn))}
		})
	})
}

// WorkerRegistered fires workers-available.
func (d *Discovery) WorkerRegistered(workerID string) {
	if d.peer.has(TriggerWorkersAvailable) {
		ev := map[string]any{"event": "worker_metadata_updated", "worker_id": workerID}
		d.fire(TriggerWorkersAvailable, func(bound) any { return ev })
	}
}

// fire calls every function bound to trigger type typ with data(b) of its trigger b, each on a
// goroutine of its own. The event of a function a session of a gated listener serves holds only
// what that session may see (core.Engine.FunctionsForServer).
func (d *Discovery) fire(typ string, data func(b bound) any) {
	for _, b := range d.peer.bound(typ) {
		raw, err := json.Marshal(data(b))
		if err != nil {
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), fireTimeout)
			defer cancel()
			if _, perr := d.e.Invoke(ctx, b.ns, b.fn, raw, fireTimeout); perr != nil {
				d.log.Debug("trigger delivery failed", "trigger_type", typ, "trigger_id", b.id, "function", b.fn, "code", perr.Code)
			}
		}()
	}
}

// bound is one trigger registered on an engine trigger type.
type bound struct{ id, typ, fn, ns string }

// peer is the engine's in-process provider of its trigger types in the trigger registry.
type peer struct {
	d  *Discovery
	mu sync.Mutex
	// triggers by id
	triggers map[string]bound
}

func (p *peer) ID() string         { return "engine" }
func (p *peer) WorkerName() string { return WorkerName }

// Send takes the frames the registry sends a provider: it keeps (or drops) the trigger and
// accepts it at once.
func (p *peer) Send(m *protocol.Message) error {
	switch m.Type {
	case protocol.TypeRegisterTrigger:
		ns := m.NamespaceOr(protocol.DefaultNamespace)
		p.mu.Lock()
		p.triggers[m.ID] = bound{id: m.ID, typ: m.TriggerType, fn: m.FunctionID, ns: ns}
		p.mu.Unlock()
		// Sent after the registry's lock is released: answering now is safe.
		p.d.e.Triggers().Handle(p, ns, &protocol.Message{Type: protocol.TypeTriggerRegistrationResult, ID: m.ID,
			TriggerType: m.TriggerType, FunctionID: m.FunctionID})
	case protocol.TypeUnregisterTrigger:
		p.mu.Lock()
		delete(p.triggers, m.ID)
		p.mu.Unlock()
	}
	return nil
}

func (p *peer) has(typ string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.triggers {
		if b.typ == typ {
			return true
		}
	}
	return false
}

func (p *peer) bound(typ string) []bound {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []bound
	for _, b := range p.triggers {
		if b.typ == typ {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

var _ triggers.Peer = (*peer)(nil)

// functionSummary is one row of iii's FunctionSummary.
type functionSummary struct {
	FunctionID  string          `json:"function_id"`
	Namespace   string          `json:"namespace"`
	WorkerName  string          `json:"worker_name"`
	Description string          `json:"description,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

func (d *Discovery) summaries(rows []core.FunctionRow) []functionSummary {
	out := make([]functionSummary, 0, len(rows))
	for _, r := range rows {
		out = append(out, summary(r))
	}
	return out
}

func summary(r core.FunctionRow) functionSummary {
	return functionSummary{FunctionID: r.FunctionID, Namespace: r.Namespace, WorkerName: ownerName(r), Description: r.Description, Metadata: r.Metadata}
}

// ownerName is the worker_name of a function: its worker's name, else (as iii) the first "::"
// segment of its id.
func ownerName(r core.FunctionRow) string {
	if r.WorkerName != "" {
		return r.WorkerName
	}
	first, _, _ := strings.Cut(r.FunctionID, "::")
	return first
}

type triggerRef struct {
	ID          string          `json:"id"`
	TriggerType string          `json:"trigger_type"`
	Config      json.RawMessage `json:"config"`
}

type functionDetail struct {
	FunctionID         string          `json:"function_id"`
	Namespace          string          `json:"namespace"`
	WorkerName         string          `json:"worker_name"`
	Description        string          `json:"description,omitempty"`
	RequestSchema      json.RawMessage `json:"request_schema,omitempty"`
	ResponseSchema     json.RawMessage `json:"response_schema,omitempty"`
	Metadata           json.RawMessage `json:"metadata,omitempty"`
	RegisteredTriggers []triggerRef    `json:"registered_triggers"`
}

type unavailable struct {
	FunctionID string `json:"function_id"`
	Error      string `json:"error"`
}

// functionInfo answers engine::functions::info. A function a session of a gated listener may
// not call is, to it, not registered, as in engine::functions::list.
func (d *Discovery) functionInfo(_ context.Context, c core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		FunctionID  *string  `json:"function_id"`
		FunctionIDs []string `json:"function_ids"`
		Namespace   *string  `json:"namespace"`
	}
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {function_id} or {function_ids: [...]}, namespace?: %v", FnFunctionInfo, err)
	}
	switch {
	case in.FunctionID != nil && in.FunctionIDs != nil:
		return nil, protocol.NewError(errcode.InvalidArguments, "pass either `function_id` or `function_ids`, not both")
	case in.FunctionID == nil && in.FunctionIDs == nil:
		return nil, protocol.NewError(errcode.InvalidArguments, "missing field `function_id` (or `function_ids` for a batch)")
	}
	rows := d.e.FunctionsFor(c)
	trig := d.e.Triggers().Triggers(triggers.Filter{})
	if in.FunctionID != nil {
		r, perr := resolveFunction(rows, *in.FunctionID, in.Namespace)
		if perr != nil {
			return nil, perr
		}
		return detail(r, trig), nil
	}
	var ids []string
	seen := map[string]bool{}
	for _, id := range in.FunctionIDs {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, protocol.NewError(errcode.InvalidArguments, "`function_ids` must be a non-empty array of function ids")
	}
	if len(ids) > BatchMax {
		return nil, protocol.NewError(errcode.InvalidArguments, "too many function_ids (max %d)", BatchMax)
	}
	out := make([]any, 0, len(ids))
	for _, id := range ids {
		r, perr := resolveFunction(rows, id, in.Namespace)
		if perr != nil {
			out = append(out, unavailable{FunctionID: id, Error: "not_found"})
			continue
		}
		out = append(out, detail(r, trig))
	}
	return map[string]any{"functions": out}, nil
}

func detail(r core.FunctionRow, trig []triggers.TriggerInfo) functionDetail {
	refs := []triggerRef{}
	for _, t := range trig {
		if t.Namespace == r.Namespace && t.FunctionID == r.FunctionID {
			refs = append(refs, triggerRef{ID: t.ID, TriggerType: t.TriggerType, Config: t.Config})
		}
	}
	return functionDetail{FunctionID: r.FunctionID, Namespace: r.Namespace, WorkerName: ownerName(r), Description: r.Description,
		RequestSchema: r.RequestFormat, ResponseSchema: r.ResponseFormat, Metadata: r.Metadata, RegisteredTriggers: refs}
}

// resolveFunction finds id: strictly in *ns when given; else in default, else in the one
// namespace that has it.
func resolveFunction(rows []core.FunctionRow, id string, ns *string) (core.FunctionRow, *protocol.Error) {
	byNS := map[string]core.FunctionRow{}
	var where []string
	for _, r := range rows {
		if r.FunctionID == id {
			byNS[r.Namespace] = r
			where = append(where, r.Namespace)
		}
	}
	if ns != nil {
		if r, ok := byNS[*ns]; ok {
			return r, nil
		}
		if len(where) == 0 {
			return core.FunctionRow{}, protocol.NewError(errcode.NotFound, "Function '%s' is not registered.", id)
		}
		return core.FunctionRow{}, protocol.NewError(errcode.NotFound, "Function '%s' is not registered in namespace %s; it is registered in namespace(s): %s.",
			id, *ns, strings.Join(where, ", "))
	}
	if r, ok := byNS[protocol.DefaultNamespace]; ok {
		return r, nil
	}
	switch len(where) {
	case 0:
		return core.FunctionRow{}, protocol.NewError(errcode.NotFound, "Function '%s' is not registered.", id)
	case 1:
		return byNS[where[0]], nil
	}
	return core.FunctionRow{}, protocol.NewError(errcode.NotFound,
		"Function '%s' is ambiguous: it is registered in namespace(s): %s. Pass `namespace` to select one.", id, strings.Join(where, ", "))
}

type workerDetail struct {
	Name              *string `json:"name"`
	Description       *string `json:"description"`
	Version           *string `json:"version"`
	ID                string  `json:"id"`
	Namespace         string  `json:"namespace"`
	Runtime           *string `json:"runtime"`
	OS                *string `json:"os"`
	Status            string  `json:"status"`
	FunctionCount     int     `json:"function_count"`
	ConnectedAtMS     int64   `json:"connected_at_ms"`
	ActiveInvocations int     `json:"active_invocations"`
	Isolation         *string `json:"isolation"`
	IPAddress         *string `json:"ip_address"`
	PID               int     `json:"pid,omitempty"`
	Internal          bool    `json:"internal"`
	LatestMetrics     any     `json:"latest_metrics,omitempty"`
}

type triggerTypeSummary struct {
	ID          string `json:"id"`
	Namespace   string `json:"namespace"`
	WorkerName  string `json:"worker_name"`
	Description string `json:"description"`
}

type registeredTrigger struct {
	ID            string          `json:"id"`
	TriggerType   string          `json:"trigger_type"`
	FunctionID    string          `json:"function_id"`
	WorkerName    string          `json:"worker_name"`
	Status        triggers.Status `json:"status"`
	Config        json.RawMessage `json:"config"`
	ConfigSummary string          `json:"config_summary"`
}

var started = time.Now()

func str(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// workerInfo answers engine::workers::info. A session of a gated listener sees the workers and
// functions engine::workers::list shows it, as engine::functions::list does: a worker serving
// none it may call is, to it, not connected.
func (d *Discovery) workerInfo(_ context.Context, c core.Caller, payload json.RawMessage) (any, error) {
	var in struct {
		Name      string  `json:"name"`
		Namespace *string `json:"namespace"`
	}
	if err := json.Unmarshal(payload, &in); err != nil || in.Name == "" {
		msg := "missing field `name`"
		if err != nil {
			msg = err.Error()
		}
		return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {name, namespace?}: %s", FnWorkerInfo, msg)
	}
	workers := d.e.WorkersFor(c)
	rows := d.e.FunctionsFor(c)
	ns, perr := resolveWorker(in.Name, in.Namespace, namespacesOf(in.Name, workers))
	if perr != nil {
		return nil, perr
	}
	wd, fns, workerID := d.describeWorker(in.Name, ns, workers, rows)
	wd.FunctionCount = len(fns)
	set := map[string]bool{}
	functions := []functionSummary{}
	for _, r := range rows {
		if r.Namespace == ns && contains(fns, r.FunctionID) && (r.Builtin == (workerID == "engine")) {
			functions = append(functions, summary(r))
			set[r.FunctionID] = true
		}
	}
	types, regs := d.workerTriggers(in.Name, ns, workerID, set)
	return map[string]any{"worker": wd, "functions": functions, "trigger_types": types, "registered_triggers": regs}, nil
}

// namespacesOf lists the namespaces where a worker called name is connected ("engine" is the
// built-ins, in default).
func namespacesOf(name string, workers []core.WorkerRow) []string {
	var where []string
	if name == "engine" {
		where = append(where, protocol.DefaultNamespace)
	}
	for _, w := range workers {
		if w.Name == name && !contains(where, w.Namespace) {
			where = append(where, w.Namespace)
		}
	}
	return where
}

// describeWorker returns the detail of the worker called name in namespace ns (the engine's
// built-ins for engine in default, else the first such worker connected), the functions it
// registered and its id.
func (d *Discovery) describeWorker(name, ns string, workers []core.WorkerRow, rows []core.FunctionRow) (wd workerDetail, fns []string, workerID string) {
	if name == "engine" && ns == protocol.DefaultNamespace {
		for _, r := range rows {
			if r.Builtin {
				fns = append(fns, r.FunctionID)
			}
		}
		wd = workerDetail{Name: str("engine"), Description: str("The engine's built-in functions"), ID: "engine", Namespace: ns,
			Runtime: str("engine"), Status: "available", ConnectedAtMS: started.UnixMilli(), Isolation: str("in-process"), Internal: true}
		return wd, fns, "engine"
	}
	for _, w := range workers {
		if w.Name != name || w.Namespace != ns {
			continue
		}
		wd = workerDetail{Name: str(w.Name), Description: w.Description, Version: w.Version, ID: w.ID, Namespace: ns, Runtime: w.Runtime,
			OS: w.OS, Status: w.Status, ConnectedAtMS: w.ConnectedAtMS, ActiveInvocations: w.ActiveInvocations, Isolation: w.Isolation,
			IPAddress: w.IPAddress, PID: w.PID}
		if d.metrics != nil {
			if m, ok := d.metrics.WorkerMetrics(w.ID).(map[string]any); ok {
				if _, has := m["runtime"]; !has && w.Runtime != nil {
					m["runtime"] = *w.Runtime // iii's WorkerMetrics carries it
				}
				wd.LatestMetrics = m
			}
		}
		return wd, w.Functions, w.ID
	}
	return wd, nil, ""
}

// workerTriggers returns the trigger types the worker workerID registered (the discovery
// worker's for the engine) and the triggers registered in ns on its functions (set), shown as
// the worker called name's.
func (d *Discovery) workerTriggers(name, ns, workerID string, set map[string]bool) ([]triggerTypeSummary, []registeredTrigger) {
	types := []triggerTypeSummary{}
	for _, t := range d.e.Triggers().Types() {
		if t.WorkerID == workerID || workerID == "engine" && t.WorkerName == WorkerName {
			types = append(types, triggerTypeSummary{ID: t.ID, Namespace: t.Namespace, WorkerName: t.WorkerName, Description: t.Description})
		}
	}
	regs := []registeredTrigger{}
	for _, t := range d.e.Triggers().Triggers(triggers.Filter{}) {
		if t.Namespace == ns && set[t.FunctionID] {
			regs = append(regs, registeredTrigger{ID: t.ID, TriggerType: t.TriggerType, FunctionID: t.FunctionID,
				WorkerName: name, Status: t.Status, Config: t.Config, ConfigSummary: t.ConfigSummary})
		}
	}
	return types, regs
}

func resolveWorker(name string, ns *string, where []string) (string, *protocol.Error) {
	if ns != nil {
		if contains(where, *ns) {
			return *ns, nil
		}
		if len(where) == 0 {
			return "", protocol.NewError(errcode.NotFound, "Worker '%s' is not connected.", name)
		}
		return "", protocol.NewError(errcode.NotFound, "Worker '%s' is not connected in the requested namespace; it is connected in namespace(s): %s.",
			name, strings.Join(where, ", "))
	}
	if contains(where, protocol.DefaultNamespace) {
		return protocol.DefaultNamespace, nil
	}
	switch len(where) {
	case 0:
		return "", protocol.NewError(errcode.NotFound, "Worker '%s' is not connected.", name)
	case 1:
		return where[0], nil
	}
	return "", protocol.NewError(errcode.NotFound, "Worker '%s' is ambiguous: it is connected in namespace(s): %s. Pass `namespace` to disambiguate.",
		name, strings.Join(where, ", "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
