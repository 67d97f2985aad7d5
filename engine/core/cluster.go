package core

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/cluster"
	"github.com/iii-go/iii/engine/protocol"
)

// JoinCluster links the engine to the others on the NATS cluster of o (package cluster): it
// offers them the functions its workers serve and sends them the calls of functions no local
// worker serves. Call it before Serve; the link ends with the engine.
func (e *Engine) JoinCluster(o cluster.Options) error {
	if o.Logger == nil {
		o.Logger = e.log
	}
	o.Workers = e.workerRows
	c, err := cluster.Connect(o, e.serveCluster)
	if err != nil {
		return err
	}
	e.cluster = c
	e.syncCluster()
	return nil
}

// InCluster reports whether the engine joined a cluster (JoinCluster).
func (e *Engine) InCluster() bool { return e.cluster != nil }

// localOnly marks a call another engine sent: it is served by this engine's workers or not
// at all, never sent to the cluster again.
type localOnly struct{}

// serveCluster runs a call of another engine of the cluster on this engine's workers. A call of
// a function a worker of this engine serves is forwarded to it as forwardAsync does, and its
// result answered from the goroutine that reads it, so no goroutine waits for it; any other
// (a built-in, an HTTP function, one to refuse) goes through dispatch in a goroutine of its own.
func (e *Engine) serveCluster(ctx context.Context, k cluster.Key, r cluster.Request, timeout time.Duration, answer func(json.RawMessage, *protocol.Error)) {
	caller := Caller{WorkerID: r.Caller.WorkerID, Name: r.Caller.Name, Namespace: r.Caller.Namespace}
	if e.forwardCluster(caller, k, r, timeout, answer) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		answer(e.dispatch(context.WithValue(ctx, localOnly{}, true), caller, k.Namespace, k.FunctionID, r.Data, r.Metadata,
			traceCtx{r.Traceparent, r.Baggage}, timeout, false))
	}()
}

// forwardCluster sends another engine's call to the worker of this engine that serves its
// function, with answer as the pending call's outcome (the sweep answers timeout past its
// deadline), and reports whether it did: false for a built-in, a function no worker here
// serves, an HTTP function or a protected one, which dispatch serves or refuses.
func (e *Engine) forwardCluster(caller Caller, k cluster.Key, r cluster.Request, timeout time.Duration, answer func(json.RawMessage, *protocol.Error)) bool {
	_, isBuiltin, f, several := e.lookup(k.Namespace, k.FunctionID)
	if isBuiltin || f == nil || f.http != nil || f.frame.Protected {
		return false
	}
	data := r.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	tp, end := e.startCall(caller, k.Namespace, k.FunctionID, r.Traceparent, r.Baggage, f)
	tc := traceCtx{tp, r.Baggage}
	pc := &pendingCall{reply: answer, end: end, watch: e.watchCall(caller, k.Namespace, k.FunctionID, data, r.Metadata, tc), e: e}
	if several {
		pc.retry = newRetry(k.Namespace, data, r.Metadata, tc)
	}
	if _, perr := e.startForward(f.conn, k.FunctionID, data, r.Metadata, tc, timeout, pc); perr != nil {
		pc.fn = k.FunctionID
		pc.deliver(nil, perr)
	}
	return true
}

// callCluster sends a call of a function no local worker serves to the cluster; found is false
// when no engine serves it (or the engine is not in a cluster, or the call came from one).
func (e *Engine) callCluster(ctx context.Context, caller Caller, ns, id string, data, meta json.RawMessage, tc traceCtx, timeout time.Duration, void bool) (json.RawMessage, *protocol.Error, bool) {
	if e.cluster == nil || ctx.Value(localOnly{}) != nil {
		return nil, nil, false
	}
	if timeout <= 0 {
		timeout = e.opts.MaxCallTimeout
	}
	r := cluster.Request{Data: data, Metadata: meta, Traceparent: tc.traceparent, Baggage: tc.baggage,
		Caller: cluster.Caller{WorkerID: caller.WorkerID, Name: caller.Name, Namespace: caller.Namespace}}
	k := cluster.Key{Namespace: ns, FunctionID: id}
	if void {
		r.Data = append(json.RawMessage(nil), data...)
		r.Metadata = append(json.RawMessage(nil), meta...)
		go e.cluster.Call(context.Background(), k, r, timeout)
		return nil, nil, true
	}
	return e.cluster.Call(ctx, k, r, timeout)
}

// forwardToCluster sends a worker's call of a function no worker of this engine serves to the
// cluster with no goroutine waiting for it (Cluster.CallAsync): the goroutine that receives
// the answer writes the result frame. It reports false, leaving the call to dispatch, when the
// engine is in no cluster, the call is void or names a blank namespace, or c has MaxInflight engine-served calls in
// flight already (dispatch's path refuses it).
func (e *Engine) forwardToCluster(c *conn, m *protocol.Message, ns string) bool {
	if _, perr := requestNamespace(m.Namespace); e.cluster == nil || m.IsVoid() || perr != nil {
		return false
	}
	if n := c.inflight.Add(1); int(n) > e.opts.MaxInflight {
		c.inflight.Add(-1)
		return false
	}
	caller := c.caller()
	tp, end := e.startCall(caller, ns, m.FunctionID, m.Traceparent, m.Baggage, nil)
	// m is borrowed from the read buffer: CallAsync encodes it before returning, and what the
	// answer needs is copied.
	k := cluster.Key{Namespace: strings.Clone(ns), FunctionID: strings.Clone(m.FunctionID)}
	result := &protocol.Message{Type: protocol.TypeInvokeFunction, InvocationID: strings.Clone(m.InvocationID), FunctionID: k.FunctionID}
	r := cluster.Request{Data: m.Data, Metadata: m.Metadata, Traceparent: tp, Baggage: m.Baggage,
		Caller: cluster.Caller{WorkerID: caller.WorkerID, Name: caller.Name, Namespace: caller.Namespace}}
	e.cluster.CallAsync(k, r, e.callTimeout(m.TimeoutMS), func(res json.RawMessage, perr *protocol.Error, found bool) {
		defer c.inflight.Add(-1)
		if !found {
			perr = e.notFound(k.Namespace, k.FunctionID)
		}
		end(perr)
		c.sendResult(result, res, perr)
	})
	return true
}

// syncCluster offers the cluster the functions this engine's workers serve now (protected
// ones excepted: the serving engine could not check a remote caller's token).
func (e *Engine) syncCluster() {
	if e.cluster == nil {
		return
	}
	e.clusterMu.Lock()
	defer e.clusterMu.Unlock()
	e.mu.RLock()
	offer := make([]cluster.Function, 0, len(e.funcs))
	for k, f := range e.funcs {
		if !f.frame.Protected {
			offer = append(offer, cluster.Function{Namespace: k.ns, FunctionID: k.id, Description: f.frame.Description,
				WorkerID: f.conn.id, WorkerName: f.conn.name()})
		}
	}
	e.mu.RUnlock()
	e.cluster.Sync(offer)
}

// workerRows are this engine's engine::workers::list rows, for the other engines' listings.
func (e *Engine) workerRows() []json.RawMessage {
	res, _ := e.listWorkers(context.Background(), Caller{}, nil)
	rows := res.(map[string]any)["workers"].([]workerRow)
	out := make([]json.RawMessage, 0, len(rows))
	for _, r := range rows {
		if b, err := json.Marshal(r); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// listClusterWorkers is engine::workers::list: this engine's workers, then, in a cluster, those
// the other engines announced, each with its engine (filtered alike).
func (e *Engine) listClusterWorkers(ctx context.Context, c Caller, payload json.RawMessage) (any, error) {
	res, err := e.listWorkers(ctx, c, payload)
	if err != nil || e.cluster == nil {
		return res, err
	}
	var in struct {
		Search  string `json:"search"`
		Runtime string `json:"runtime"`
		Status  string `json:"status"`
	}
	_ = json.Unmarshal(payload, &in)
	type remoteRow struct {
		workerRow
		Engine string `json:"engine"`
	}
	out := []any{}
	for _, w := range res.(map[string]any)["workers"].([]workerRow) {
		out = append(out, w)
	}
	for _, r := range e.cluster.RemoteWorkers() {
		var w workerRow
		if json.Unmarshal(r.Row, &w) != nil || !matchesWorker(w, in.Search, in.Runtime, in.Status) {
			continue
		}
		out = append(out, remoteRow{w, r.Engine})
	}
	return map[string]any{"workers": out}, nil
}
