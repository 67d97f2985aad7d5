package core

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/triggers"
)

// Call is what an Observer is told of one invocation the engine routes.
type Call struct {
	FunctionID string
	Namespace  string
	CallerID   string // the calling connection's worker id; "engine" for the engine's own calls
	CallerName string
	WorkerID   string // the serving worker's id; "engine" for a built-in, "http" for an HTTP-invoked function
	WorkerName string
	// Traceparent and Baggage are the W3C trace context the invoking frame carried ("" when none).
	Traceparent string
	Baggage     string
	Start       time.Time
}

// Observer sees what the engine does, for observability and discovery (packages observability
// and discovery). Its methods are called on the engine's hot paths and must not block.
type Observer interface {
	// StartCall is called as an invocation is routed. It returns the traceparent to forward to
	// the serving worker ("" forwards the caller's) and a function called once with the outcome
	// (perr nil on success).
	StartCall(c Call) (traceparent string, end func(perr *protocol.Error))
	// Telemetry takes one SDK telemetry frame: signal "OTLP" (traces), "MTRC" (metrics) or
	// "LOGS" (logs), body the OTLP/JSON request after the 4-byte prefix. workerID is the
	// sending connection's id, "" for a telemetry-only /otel socket. body is not kept by the
	// engine after the call returns.
	Telemetry(workerID, signal string, body []byte)
	// FunctionsChanged is called after a function is registered or unregistered (also when a
	// connection's functions go with it).
	FunctionsChanged()
	// WorkerRegistered is called after engine::workers::register succeeded.
	WorkerRegistered(workerID string)
}

// SetObserver installs o (nil: none). Call it before Serve.
func (e *Engine) SetObserver(o Observer) { e.obs = o }

// startCall tells the observer of a call; the returned end is never nil.
func (e *Engine) startCall(caller Caller, ns, id, traceparent, baggage string, f *fnEntry) (string, func(*protocol.Error)) {
	if e.obs == nil || caller.inSpan {
		return traceparent, func(*protocol.Error) {}
	}
	c := Call{FunctionID: id, Namespace: ns, CallerID: caller.WorkerID, CallerName: caller.Name,
		WorkerID: "engine", WorkerName: "engine", Traceparent: traceparent, Baggage: baggage, Start: time.Now()}
	switch {
	case f == nil:
	case f.http != nil:
		c.WorkerID, c.WorkerName = "http", "iii-http-functions"
	default:
		c.WorkerID, c.WorkerName = f.conn.id, f.conn.name()
	}
	tp, end := e.obs.StartCall(c)
	if tp == "" {
		tp = traceparent
	}
	if end == nil {
		end = func(*protocol.Error) {}
	}
	return tp, end
}

func (e *Engine) functionsChanged() {
	e.syncCluster()
	if e.obs != nil {
		e.obs.FunctionsChanged()
	}
}

// FunctionRow is one function as the engine knows it, built-ins included.
type FunctionRow struct {
	FunctionID     string
	Namespace      string
	Description    string
	WorkerID       string // "engine" for a built-in
	WorkerName     string
	RequestFormat  json.RawMessage
	ResponseFormat json.RawMessage
	Metadata       json.RawMessage
	Builtin        bool
}

// Functions lists every function, built-ins (in default) first by id, then by namespace and id.
func (e *Engine) Functions() []FunctionRow {
	e.mu.RLock()
	out := make([]FunctionRow, 0, len(e.builtins)+len(e.funcs))
	for id, b := range e.builtins {
		out = append(out, FunctionRow{FunctionID: id, Namespace: protocol.DefaultNamespace, Description: b.description,
			WorkerID: "engine", WorkerName: "engine", Builtin: true})
	}
	for k, f := range e.funcs {
		out = append(out, FunctionRow{FunctionID: k.id, Namespace: k.ns, Description: f.frame.Description, WorkerID: f.conn.id,
			WorkerName: f.conn.name(), RequestFormat: f.frame.RequestFormat, ResponseFormat: f.frame.ResponseFormat, Metadata: f.frame.Metadata})
	}
	e.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].FunctionID < out[j].FunctionID
	})
	return out
}

// WorkerRow is one row of engine::workers::list.
type WorkerRow = workerRow

// Workers lists the connected workers as engine::workers::list does, unfiltered.
func (e *Engine) Workers() []WorkerRow { return e.WorkersFor(Caller{}) }

// WorkersFor lists the connected workers as engine::workers::list shows them to c: on a gated
// listener, only the functions its session may call, and only the workers serving one of them
// (and its own connection).
func (e *Engine) WorkersFor(c Caller) []WorkerRow {
	res, _ := e.listWorkers(nil, c, nil)
	return res.(map[string]any)["workers"].([]workerRow)
}

// FunctionsForServer is Functions as the worker serving function id of ns may see them: when a
// session of a gated listener serves it, FunctionsFor that session, so that an event handed to
// its function carries no more than a listing would show it.
func (e *Engine) FunctionsForServer(ns, id string) []FunctionRow {
	var gated *conn
	e.mu.RLock()
	if f := e.funcs[fkey{ns, id}]; f != nil {
		f.instances(func(i *fnEntry) {
			if gated == nil && i.conn.session != nil {
				gated = i.conn
			}
		})
	}
	e.mu.RUnlock()
	if gated == nil {
		return e.Functions()
	}
	return e.FunctionsFor(Caller{conn: gated})
}

// FunctionsFor is Functions as c may see them: on a gated listener, only those its session may
// call, as engine::functions::list shows them.
func (e *Engine) FunctionsFor(c Caller) []FunctionRow {
	rows := e.Functions()
	if c.conn == nil || c.conn.session == nil {
		return rows
	}
	out := rows[:0]
	for _, r := range rows {
		if e.mayList(c.conn, r.FunctionID, r.Namespace, r.Metadata) {
			out = append(out, r)
		}
	}
	return out
}

// Triggers is the engine's trigger registry: engine-provided trigger types register with it
// through an in-process triggers.Peer.
func (e *Engine) Triggers() *triggers.Registry { return e.triggers }
