package core

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// workerRow is one row of engine::workers::list: iii's WorkerSummary (its optional strings null
// when unknown; status "connected", as iii's for a live connection; ip_address null, as iii's
// without an RBAC session, and the peer's address for a connection of a gated listener) and
// this engine's pid, registered, functions and connected_at.
type workerRow struct {
	ID                string   `json:"id"`
	Name              string   `json:"name"`
	Namespace         string   `json:"namespace"`
	Description       *string  `json:"description"`
	Version           *string  `json:"version"`
	Runtime           *string  `json:"runtime"`
	OS                *string  `json:"os"`
	Status            string   `json:"status"`
	FunctionCount     int      `json:"function_count"`
	ConnectedAtMS     int64    `json:"connected_at_ms"`
	ActiveInvocations int      `json:"active_invocations"`
	Isolation         *string  `json:"isolation"`
	IPAddress         *string  `json:"ip_address"`
	PID               int      `json:"pid,omitempty"`
	Registered        bool     `json:"registered"`
	Functions         []string `json:"functions"`
	ConnectedAt       string   `json:"connected_at"`
}

// matchesWorker applies engine::workers::list's filters to w: search is a case-insensitive
// substring of the name, runtime and status match exactly.
func matchesWorker(w workerRow, search, runtime, status string) bool {
	return (search == "" || strings.Contains(strings.ToLower(w.Name), strings.ToLower(search))) &&
		(runtime == "" || w.Runtime != nil && *w.Runtime == runtime) && (status == "" || status == w.Status)
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// listWorkers answers engine::workers::list {search?, runtime?, status?}, iii's filters: search
// is a case-insensitive substring of the name, runtime and status match exactly.
//
// A session of a gated listener sees, as in engine::functions::list, only the functions it may
// call, and only the workers that serve one of them, besides its own connection.
func (e *Engine) listWorkers(_ context.Context, caller Caller, payload json.RawMessage) (any, error) {
	var in struct {
		Search  string `json:"search"`
		Runtime string `json:"runtime"`
		Status  string `json:"status"`
	}
	if len(payload) > 0 && string(payload) != "null" {
		if err := json.Unmarshal(payload, &in); err != nil {
			return nil, protocol.NewError(errcode.InvalidArguments, "%s takes {search?, runtime?, status?}: %v", protocol.FnListWorkers, err)
		}
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	byConn := map[*conn][]string{}
	for k, f := range e.funcs {
		if e.mayList(caller.conn, k.id, k.ns, f.frame.Metadata) {
			f.instances(func(i *fnEntry) { byConn[i.conn] = append(byConn[i.conn], k.id) })
		}
	}
	out := []workerRow{}
	for _, c := range e.conns {
		if caller.conn != nil && caller.conn.session != nil && c != caller.conn && len(byConn[c]) == 0 {
			continue
		}
		c.mu.Lock()
		w := workerRow{ID: c.id, Name: c.info.Name, Namespace: c.nsOrDefault(), Runtime: orNull(c.info.Runtime),
			Version: orNull(c.info.Version), Description: orNull(c.info.Description), OS: orNull(c.info.OS),
			Status: "connected", ConnectedAtMS: c.connectedAt.UnixMilli(), ActiveInvocations: len(c.pending),
			Isolation: orNull(c.info.Isolation), IPAddress: orNull(c.sessionIP()), PID: c.info.PID, Registered: c.registered, Functions: byConn[c],
			ConnectedAt: c.connectedAt.UTC().Format(time.RFC3339)}
		c.mu.Unlock()
		if w.Functions == nil {
			w.Functions = []string{}
		}
		sort.Strings(w.Functions)
		w.FunctionCount = len(w.Functions)
		if !matchesWorker(w, in.Search, in.Runtime, in.Status) {
			continue
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ID < out[j].ID
	})
	return map[string]any{"workers": out}, nil
}

func (e *Engine) listFunctions(_ context.Context, caller Caller, payload json.RawMessage) (any, error) {
	var in struct {
		Namespace string `json:"namespace"`
	}
	_ = json.Unmarshal(payload, &in)
	type fn struct {
		FunctionID     string          `json:"function_id"`
		Namespace      string          `json:"namespace"`
		Description    string          `json:"description,omitempty"`
		WorkerID       string          `json:"worker_id"`
		WorkerName     string          `json:"worker_name,omitempty"`
		RequestFormat  json.RawMessage `json:"request_format,omitempty"`
		ResponseFormat json.RawMessage `json:"response_format,omitempty"`
		Engine         string          `json:"engine,omitempty"` // a function of another engine of the cluster
	}
	e.mu.RLock()
	out := []fn{}
	for id, b := range e.builtins {
		if (in.Namespace == "" || in.Namespace == protocol.DefaultNamespace) && e.mayList(caller.conn, id, protocol.DefaultNamespace, nil) {
			out = append(out, fn{FunctionID: id, Namespace: protocol.DefaultNamespace, Description: b.description, WorkerID: "engine", WorkerName: "engine"})
		}
	}
	for k, f := range e.funcs {
		if in.Namespace != "" && in.Namespace != k.ns || !e.mayList(caller.conn, k.id, k.ns, f.frame.Metadata) {
			continue
		}
		f.conn.mu.Lock()
		name := f.conn.info.Name
		f.conn.mu.Unlock()
		out = append(out, fn{FunctionID: k.id, Namespace: k.ns, Description: f.frame.Description, WorkerID: f.conn.id,
			WorkerName: name, RequestFormat: f.frame.RequestFormat, ResponseFormat: f.frame.ResponseFormat})
	}
	e.mu.RUnlock()
	if e.cluster != nil {
		local := make(map[fkey]bool, len(out))
		for _, f := range out {
			local[fkey{f.Namespace, f.FunctionID}] = true
		}
		for _, r := range e.cluster.Remote() {
			k := fkey{r.Namespace, r.FunctionID}
			if local[k] || in.Namespace != "" && in.Namespace != r.Namespace || !e.mayList(caller.conn, r.FunctionID, r.Namespace, nil) {
				continue
			}
			local[k] = true // one row per function, whichever engines serve it
			out = append(out, fn{FunctionID: r.FunctionID, Namespace: r.Namespace, Description: r.Description,
				WorkerID: r.WorkerID, WorkerName: r.WorkerName, Engine: r.Engine})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].FunctionID < out[j].FunctionID
	})
	return map[string]any{"functions": out}, nil
}
