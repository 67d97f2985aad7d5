// Package sandbox is the engine's iii-sandbox router. It serves every sandbox::* function of the
// sandbox contract in the default namespace and forwards each call, payload and reply unchanged,
// to <adapter>::<op> in the namespace of the bound adapter worker (req A2, A4).
//
// Binding comes from config.yaml's top-level sandbox: section, or from the Compose that owns the
// engine through engine::sandbox::bind {"adapter"?, "namespace"?} (owner token required; adapter
// defaults to sandbox-libkrun, namespace to the caller's namespace). Unbound: S303. Bound but no
// live worker serves the function, or the worker leaves mid-call: S301. The adapter's
// <adapter>::adapter::info contract must have major 1, else S302; replies of a contract 1.0
// adapter to exec and run get stdout_truncated/stderr_truncated = false added. Each call is
// one span, "call sandbox::<op>"; once the adapter's adapter::info is known it goes on from the
// caller's frame with only its function id changed (Router).
//
// Trust: the router forwards every sandbox payload (code to run, files
// to write) to whoever serves <adapter>::<op> in the bound namespace, so the binding claims the
// prefix "<adapter>::" there (core.Engine.ClaimPrefix):
//   - every function under the prefix comes from one live worker connection, the first that
//     registered one of them; any other connection's registration of an id under the prefix is
//     refused FUNCTION_PREFIX_CONFLICT while that worker is connected, so a squatter can neither
//     take over single operations nor add ones the adapter lacks, and the router never forwards
//     two operations of one binding to two different workers;
//   - in a token-protected namespace only holders of its token register at all (checked at
//     engine::workers::register);
//   - on an engine with any token-protected namespace (every engine Compose starts, including
//     one whose project runs in default), the prefix admits only a worker holding one of the
//     engine's tokens even in the unprotected namespace default.
//
// What default cannot give: on an engine with no token-protected namespace (a hand-written
// config.yaml with sandbox: {} and no namespaces:), nothing tells the real adapter from another
// local process, so the first worker to register under the prefix is the adapter until it
// disconnects. Protect such an engine by running the adapter in a token-protected namespace
// (sandbox: {namespace: NS} with NS listed under namespaces:) or from a Compose-managed engine.
// A claim made by engine::sandbox::bind applies to registrations from then on.
package sandbox

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/internal/wire"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/errcode"
)

// The contract version this engine speaks (scode holds it for the adapter too).
const (
	ContractMajor = scode.ContractMajor
	ContractMinor = scode.ContractMinor
)

// DefaultAdapter is the adapter function prefix when a binding names none.
const DefaultAdapter = scode.AdapterName

// InfoTimeout bounds the router's question to the adapter's adapter::info.
const InfoTimeout = 2 * time.Second

// Ops are the contract operations; the router serves sandbox::<op> for each.
var Ops = []string{
	"create", "exec", "run", "list", "stop", "catalog::list",
	"fs::ls", "fs::stat", "fs::mkdir", "fs::write", "fs::read", "fs::rm", "fs::chmod", "fs::mv", "fs::grep", "fs::sed",
	"process::start", "process::attach", "process::list", "process::wait", "process::signal", "process::resize",
	"expose", "unexpose", "expose::list",

	"snapshot", "snapshot::list", "snapshot::delete", "fork", "pause", "resume",
}

// sinceMinor is the contract minor that added an op, for the ops added after 1.0: the router
// answers S304 for them to an adapter of a lower minor instead of forwarding.
var sinceMinor = map[string]uint32{
	"process::start": scode.ProcessMinor, "process::attach": scode.ProcessMinor, "process::list": scode.ProcessMinor,
	"process::wait": scode.ProcessMinor, "process::signal": scode.ProcessMinor, "process::resize": scode.ProcessMinor,
	"expose": scode.ExposeMinor, "unexpose": scode.ExposeMinor, "expose::list": scode.ExposeMinor,

	"snapshot": scode.SnapshotMinor, "snapshot::list": scode.SnapshotMinor, "snapshot::delete": scode.SnapshotMinor,
	"fork": scode.SnapshotMinor, "pause": scode.SnapshotMinor, "resume": scode.SnapshotMinor,
}

// Binding names the adapter the router forwards to.
type Binding struct {
	Adapter   string `json:"adapter"`
	Namespace string `json:"namespace"`
	Source    string `json:"source"` // "config" or "compose"
}

// Contract is a {major, minor} contract version.
type Contract struct {
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

type adapterInfo struct {
	raw      json.RawMessage
	contract *Contract
}

// Router forwards sandbox::* to the bound adapter.
//
// A call takes one of two paths, which answer alike. The fast one (route, core.HandleRouted)
// serves every call it can on the caller's read loop: once the adapter connection's
// adapter::info is known and its contract major matches, the engine sends the caller's frame on
// to <adapter>::<op> with only the function id changed, the payload bytes as they came and the
// reply as the adapter sent it (a contract 1.0 exec or run reply gets its truncation flags
// appended, its other bytes kept), in one span. The other (forwarder) serves the rest: no
// binding (S303), no local adapter (S301, or one on another engine of a cluster), an
// adapter::info not asked yet (asked there, which may wait), an adapter of another major
// (S302), an op or a create/run network form newer than the adapter's minor (S304), and void
// calls.
type Router struct {
	e *core.Engine

	cur   atomic.Pointer[bound]   // nil: unbound
	mu    sync.RWMutex            // orders binds; guards infos
	infos map[string]*adapterInfo // by adapter worker id
}

// bound is a binding with what the fast path needs of it, made once per binding.
type bound struct {
	Binding
	fns  []string                                // <adapter>::<op>, by the op's index in Ops
	errs []func(*protocol.Error) *protocol.Error // the S301 rewrite of a departed adapter's errors, by op
}

// New returns a router, bound when b is not nil.
func New(e *core.Engine, b *Binding) *Router {
	r := &Router{e: e, infos: map[string]*adapterInfo{}}
	if b != nil {
		r.setBinding(b)
	}
	return r
}

// setBinding binds the router to b and claims b's adapter prefix (callers order the two).
func (r *Router) setBinding(b *Binding) {
	nb := &bound{Binding: *b, fns: make([]string, len(Ops)), errs: make([]func(*protocol.Error) *protocol.Error, len(Ops))}
	for i, op := range Ops {
		nb.fns[i] = b.Adapter + "::" + op
		nb.errs[i] = func(perr *protocol.Error) *protocol.Error {
			if perr.Code == errcode.InvocationStopped || perr.Code == errcode.FunctionNotFound {
				return r.leftMidCall(&nb.Binding, op)
			}
			return perr
		}
	}
	r.cur.Store(nb)
	r.e.ClaimPrefix(b.Namespace, b.Adapter+"::")
}

// Install registers sandbox::*, sandbox::adapter::info and engine::sandbox::bind on the engine.
func (r *Router) Install() {
	for i, op := range Ops {
		r.e.HandleRouted("sandbox::"+op, "Forwarded to the bound sandbox adapter as <adapter>::"+op, r.forwarder(op), r.route(i))
	}
	r.e.Handle("sandbox::adapter::info", "The bound sandbox adapter, its namespace, the engine's contract and the adapter's own adapter::info", r.info)
	r.e.Handle("engine::sandbox::bind", "Owner only: bind the sandbox router to {adapter, namespace}", r.bind)
}

// Bound returns the current binding or nil.
func (r *Router) Bound() *Binding {
	cur := r.cur.Load()
	if cur == nil {
		return nil
	}
	b := cur.Binding
	return &b
}

// sErr is the S-code envelope of e as the function error a caller receives.
func sErr(e *scode.Error) *protocol.Error { return protocol.RawError(e.JSON()) }

// unbound is S303: no adapter is bound, so every sandbox::* call fails (req E2).
func unbound(op string) *protocol.Error {
	return sErr(scode.New(scode.S303, "no sandbox adapter is bound to this engine, so sandbox::"+op+" has nowhere to go"))
}

// howToStart is the fix of S301. On an engine with token-protected namespaces the Compose that
// starts the adapter must hold an owner token the engine's config.yaml grants, so the text says
// that too; elsewhere the engine's owner credential (package tokens) lets a Compose of the
// engine's user publish the adapter's entry with no grant.
func (r *Router) howToStart(b *Binding) string {
	s := "Start or install the adapter in namespace '" + b.Namespace + "': if a Compose project runs there, " +
		"`iii call compose::add worker=iii-sandbox -n " + b.Namespace + "`; otherwise write a worker-compose.yaml that declares the " +
		"sandbox-libkrun container and run `iii compose --up --namespace " + b.Namespace + "` with this engine's address."
	if r.e.ProtectsNamespaces() {
		s += " This engine protects namespaces (namespaces: in its config.yaml), so that config must also grant the Compose's owner token " +
			"(an entry with owner_token_file: <state dir>/owner-token, which iii compose --up prints when it is missing), then restart the engine."
	}
	return s
}

// notConnected is S301: no adapter serves the call in the bound namespace; the message names
// the namespace and how to start or install the adapter (req E4).
func (r *Router) notConnected(b *Binding, op string) *protocol.Error {
	return sErr(scode.New(scode.S301,
		"the sandbox adapter '"+b.Adapter+"' bound to this engine is not connected in namespace '"+b.Namespace+
			"': no live worker serves "+b.Adapter+"::"+op+". "+r.howToStart(b)).WithNote(r.howToStart(b)))
}

func (r *Router) leftMidCall(b *Binding, op string) *protocol.Error {
	return sErr(scode.New(scode.S301,
		"the sandbox adapter '"+b.Adapter+"' in namespace '"+b.Namespace+"' disconnected while serving sandbox::"+op+
			"; the call did not complete. "+r.howToStart(b)).WithNote(r.howToStart(b)))
}

func incompatible(b *Binding, c Contract) *protocol.Error {
	return sErr(scode.New(scode.S302,
		"the sandbox adapter '"+b.Adapter+"' in namespace '"+b.Namespace+"' implements sandbox contract "+
			itoa(c.Major)+"."+itoa(c.Minor)+", but this engine speaks contract "+itoa(ContractMajor)+"."+itoa(ContractMinor)+
			" and needs major "+itoa(ContractMajor)))
}

// tooOld is S304: the bound adapter's contract minor predates op, so it does not serve it (a
// contract 1.1 adapter has no process functions); the caller gets this rather than a raw
// function_not_found.
func tooOld(b *Binding, op string, c *Contract) *protocol.Error {
	has := "does not serve " + b.Adapter + "::" + op
	if c != nil {
		has = "implements sandbox contract " + itoa(c.Major) + "." + itoa(c.Minor)
	}
	return sErr(scode.New(scode.S304,
		"sandbox::"+op+" needs sandbox contract "+itoa(ContractMajor)+"."+itoa(sinceMinor[op])+
			", but the sandbox adapter '"+b.Adapter+"' in namespace '"+b.Namespace+"' "+has))
}

func itoa(n uint32) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// route is the fast path of sandbox::<Ops[i]> (see Router): the adapter connection that serves
// it, once its adapter::info is known and its contract major is this engine's; false leaves
// the call to forwarder.
func (r *Router) route(i int) core.Router {
	fill := Ops[i] == "exec" || Ops[i] == "run"
	need := sinceMinor[Ops[i]]
	network := takesNetwork(Ops[i])
	return func(payload json.RawMessage) (core.Route, bool) {
		cur := r.cur.Load()
		if cur == nil {
			return core.Route{}, false
		}
		wid, ok := r.e.Lookup(cur.Namespace, cur.fns[i])
		if !ok {
			return core.Route{}, false
		}
		r.mu.RLock()
		info, known := r.infos[wid]
		r.mu.RUnlock()
		if !known || info.contract != nil && (info.contract.Major != ContractMajor || info.contract.Minor < need) {
			return core.Route{}, false
		}
		if network && info.contract != nil && info.contract.Minor < scode.EgressMinor && networkIsPolicy(payload) {
			return core.Route{}, false // the forwarder answers S304
		}
		rt := core.Route{Namespace: cur.Namespace, FunctionID: cur.fns[i], WorkerID: wid, Error: cur.errs[i]}
		if fill && info.contract != nil && info.contract.Minor == 0 {
			rt.Result = fillTruncation
		}
		return rt, true
	}
}

// forwarder is the path of sandbox::<op> calls route leaves: it answers every error of its
// own, asks an adapter's adapter::info first, and relays the call within its own span.
func (r *Router) forwarder(op string) core.Builtin {
	fill := op == "exec" || op == "run"
	need := sinceMinor[op]
	return func(ctx context.Context, _ core.Caller, payload json.RawMessage) (any, error) {
		b := r.Bound()
		if b == nil {
			return nil, unbound(op)
		}
		fn := b.Adapter + "::" + op
		wid, local := r.e.Lookup(b.Namespace, fn)
		if !local && need > 0 {
			// An op newer than 1.0 that no one serves: an adapter that is connected but
			// predates it is S304, not S301.
			if iwid, ok := r.e.Lookup(b.Namespace, b.Adapter+"::adapter::info"); ok {
				info := r.adapterInfo(ctx, b, iwid, false)
				if info.contract != nil && info.contract.Major != ContractMajor {
					return nil, incompatible(b, *info.contract)
				}
				return nil, tooOld(b, op, info.contract)
			}
		}
		if !local && !r.e.InCluster() {
			return nil, r.notConnected(b, op)
		}
		// An adapter on another engine of the cluster: its adapter::info is asked on each call
		// (the engine cannot see that adapter's connection come and go).
		info := r.adapterInfo(ctx, b, wid, false)
		if info.contract != nil && info.contract.Major != ContractMajor {
			return nil, incompatible(b, *info.contract)
		}
		if info.contract != nil && info.contract.Minor < need {
			return nil, tooOld(b, op, info.contract)
		}
		if takesNetwork(op) && info.contract != nil && info.contract.Minor < scode.EgressMinor && networkIsPolicy(payload) {
			return nil, sErr(scode.New(scode.S304,
				"sandbox::"+op+" with network as \"off\", \"on\" or an egress policy object needs sandbox contract "+itoa(ContractMajor)+"."+itoa(scode.EgressMinor)+
					", but the sandbox adapter '"+b.Adapter+"' in namespace '"+b.Namespace+"' implements sandbox contract "+itoa(info.contract.Major)+"."+itoa(info.contract.Minor)+
					" (it takes network as true or false only)"))
		}
		res, perr := r.e.Relay(ctx, b.Namespace, fn, payload, 0)
		if perr != nil {
			if perr.Code == errcode.FunctionNotFound && need > 0 && info.raw != nil {
				return nil, tooOld(b, op, info.contract)
			}
			if !local && perr.Code == errcode.FunctionNotFound {
				return nil, r.notConnected(b, op)
			}
			if perr.Code == errcode.InvocationStopped && ctx.Err() == nil || perr.Code == errcode.FunctionNotFound {
				return nil, r.leftMidCall(b, op)
			}
			return nil, perr
		}
		if fill && info.contract != nil && info.contract.Minor == 0 {
			return fillTruncation(res), nil
		}
		return res, nil
	}
}

// takesNetwork reports whether op's request has a network key (create, run).
func takesNetwork(op string) bool { return op == "create" || op == "run" }

// networkIsPolicy reports whether a create or run payload gives network as a string or an
// object (contract 1.4's forms), reading only its top-level keys and the first byte of their
// values; a payload that is not one JSON object is left to the adapter to refuse.
func networkIsPolicy(payload json.RawMessage) bool {
	found := false
	wire.ObjectMembers(payload, func(k string, first byte) {
		if k == "network" && (first == '{' || first == '"') {
			found = true
		}
	})
	return found
}

// fillTruncation adds stdout_truncated/stderr_truncated = false to a contract 1.0 reply that
// lacks them (req A5). It reads only the reply's top-level keys and appends the missing ones
// before its closing brace, so the adapter's bytes (output of any size) are neither decoded nor
// re-encoded; anything but a JSON object passes unchanged.
func fillTruncation(res json.RawMessage) json.RawMessage {
	var hasOut, hasErr, empty = false, false, true
	if !wire.ObjectKeys(res, func(k string) {
		empty = false
		switch k {
		case "stdout_truncated":
			hasOut = true
		case "stderr_truncated":
			hasErr = true
		}
	}) || hasOut && hasErr {
		return res
	}
	end := len(res) - 1
	for res[end] != '}' { // ObjectKeys accepted it: white space, then the brace
		end--
	}
	out := make(json.RawMessage, 0, len(res)+48)
	out = append(out, res[:end]...)
	for _, k := range [...]struct {
		name string
		has  bool
	}{{"stdout_truncated", hasOut}, {"stderr_truncated", hasErr}} {
		if k.has {
			continue
		}
		if !empty {
			out = append(out, ',')
		}
		out = append(out, `"`+k.name+`":false`...)
		empty = false
	}
	return append(out, res[end:]...)
}

// adapterInfo returns the adapter worker's adapter::info reply, asked once per connection for
// the contract check of calls, and afresh when refresh is set (sandbox::adapter::info, whose
// reply carries counters that change); its raw reply is nil when the adapter did not answer
// within InfoTimeout, and that too is remembered, so calls do not wait on a silent
// adapter::info twice.
func (r *Router) adapterInfo(ctx context.Context, b *Binding, wid string, refresh bool) *adapterInfo {
	r.mu.RLock()
	info, ok := r.infos[wid]
	r.mu.RUnlock()
	if ok && !refresh {
		return info
	}
	info = &adapterInfo{}
	if raw, perr := r.e.Invoke(ctx, b.Namespace, b.Adapter+"::adapter::info", json.RawMessage("{}"), InfoTimeout); perr == nil {
		info.raw = raw
		var parsed struct {
			Contract *Contract `json:"contract"`
		}
		if json.Unmarshal(raw, &parsed) == nil {
			info.contract = parsed.Contract
		}
	} else if ctx.Err() != nil {
		return info // the caller went away: learn nothing
	}
	r.mu.Lock()
	_, known := r.infos[wid]
	r.infos[wid] = info
	r.mu.Unlock()
	if !known {
		go func() {
			<-r.e.WorkerGone(wid)
			r.mu.Lock()
			delete(r.infos, wid)
			r.mu.Unlock()
		}()
	}
	return info
}

func (r *Router) info(ctx context.Context, _ core.Caller, _ json.RawMessage) (any, error) {
	out := map[string]any{
		"adapter": nil, "namespace": nil, "bound": false,
		"contract": Contract{Major: ContractMajor, Minor: ContractMinor}, "info": nil,
	}
	b := r.Bound()
	if b == nil {
		return out, nil
	}
	out["adapter"], out["namespace"], out["bound"], out["source"] = b.Adapter, b.Namespace, true, b.Source
	if wid, ok := r.e.Lookup(b.Namespace, b.Adapter+"::adapter::info"); ok {
		if info := r.adapterInfo(ctx, b, wid, true); info.raw != nil {
			out["info"] = info.raw
		}
	}
	return out, nil
}

func (r *Router) bind(_ context.Context, c core.Caller, payload json.RawMessage) (any, error) {
	if !c.Owner {
		return nil, protocol.NewError(errcode.Forbidden, "function 'engine::sandbox::bind' not allowed (only the Compose that owns this engine may bind the sandbox router)")
	}
	var in struct {
		Adapter   string `json:"adapter"`
		Namespace string `json:"namespace"`
	}
	if len(payload) > 0 && string(payload) != "null" {
		if err := json.Unmarshal(payload, &in); err != nil {
			return nil, protocol.NewError(errcode.InvalidArguments, "payload: %v", err)
		}
	}
	b := &Binding{Adapter: in.Adapter, Namespace: in.Namespace, Source: "compose"}
	if b.Adapter == "" {
		b.Adapter = DefaultAdapter
	}
	if b.Namespace == "" {
		b.Namespace = c.Namespace
	}
	if b.Namespace == "" {
		b.Namespace = protocol.DefaultNamespace
	}
	r.mu.Lock()
	r.setBinding(b)
	r.mu.Unlock()
	return b, nil
}
