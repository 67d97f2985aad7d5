package rbacproxy

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

// writeTimeout bounds one frame's write to either side; a peer that does not read ends the pair.
const writeTimeout = 30 * time.Second

// maxLookups bounds a session's metadata lookups in flight; beyond it its frames wait.
const maxLookups = 16

// session is one proxied connection: the inbound worker's socket, its engine socket and the
// rights the auth function gave it.
type session struct {
	p       *Proxy
	s       *rbac.Session
	in, out *websocket.Conn
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the two pumps, the middleware calls and the metadata lookups
	raw     bool           // a channel stream: frames pass unchanged
	lookups chan struct{}  // a slot per metadata lookup in flight

	binaryWarned bool // a refused binary frame was logged at WARN (down pump only)

	mu        sync.Mutex
	closed    websocket.StatusCode // how the engine closed its side, -1 until it did
	reason    string
	ns        string          // the namespace engine::workers::register declared
	discovery map[string]bool // invocation ids of engine::functions::list calls, whose results are filtered
	// own are the function ids (as registered: prefixed) the session registered through the
	// proxy and the engine has not rejected; a trigger may bind them (bind).
	own map[string]bool
	// registerInv is the invocation id of the session's engine::workers::register call, until
	// its result; registeredCh is closed by a successful one. Before it the engine parks
	// registrations.
	registerInv  string
	registeredCh chan struct{}
	// engineID is the engine's worker id of the session's engine connection (its
	// workerregistered frame).
	engineID string
	// barriers are the proxy's own calls on the engine side, by invocation id: their results
	// are the proxy's, not the worker's.
	barriers map[string]chan *protocol.Message
}

// run pumps frames both ways until either side closes, then closes both and waits for every
// goroutine of the pair.
func (c *session) run() {
	c.wg.Add(2)
	go c.pump(c.in, c.down)
	go c.pump(c.out, c.up)
	<-c.ctx.Done()
	_ = c.out.CloseNow()
	c.mu.Lock()
	status, reason := c.closed, c.reason
	c.mu.Unlock()
	if status < 0 {
		status = websocket.StatusNormalClosure
	}
	_ = c.in.Close(status, reason)
	c.wg.Wait()
}

// pump reads from ws and hands each text frame to handle. A binary frame from the worker is
// passed on only when it is telemetry (the SDKs' OTLP, MTRC and LOGS prefixes): the engine
// reads protocol messages from text frames only, and the proxy gates every frame it forwards.
// Any other binary frame is dropped, logged at WARN once per connection. Binary frames from the
// engine, and every frame of a channel stream, pass unchanged. Any read error ends the pair; a
// close of the engine's side is passed on to the worker.
func (c *session) pump(ws *websocket.Conn, handle func([]byte)) {
	defer c.wg.Done()
	defer c.cancel()
	other := c.out
	if ws == c.out {
		other = c.in
	}
	for {
		typ, b, err := ws.Read(context.Background()) // run closes the sockets: a cancelled read would drop the close status
		if err != nil {
			if ws == c.out {
				if st := websocket.CloseStatus(err); st >= 0 {
					var ce websocket.CloseError
					_ = errors.As(err, &ce)
					c.mu.Lock()
					c.closed, c.reason = st, ce.Reason // the engine's close reaches the worker
					c.mu.Unlock()
				}
			}
			return
		}
		if typ != websocket.MessageText || c.raw {
			if !c.raw && ws == c.in && !telemetry(b) {
				if !c.binaryWarned {
					c.binaryWarned = true
					c.p.log.Warn("ignoring frame", "code", errcode.Unsupported, "ip", c.s.IP,
						"reason", "a binary frame that is not telemetry (OTLP, MTRC or LOGS prefix); protocol messages are gated and forwarded from text frames only")
				}
				continue
			}
			c.write(other, typ, b)
			continue
		}
		handle(b)
	}
}

// telemetry reports whether a binary frame is an SDK's telemetry: a 4-byte signal prefix.
func telemetry(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	switch string(b[:4]) {
	case "OTLP", "MTRC", "LOGS":
		return true
	}
	return false
}

// write sends one frame to ws; a failure ends the pair.
func (c *session) write(ws *websocket.Conn, typ websocket.MessageType, b []byte) {
	ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
	defer cancel()
	if ws.Write(ctx, typ, b) != nil {
		c.cancel()
	}
}

func (c *session) send(ws *websocket.Conn, m *protocol.Message) {
	b, _ := protocol.Encode(m)
	c.write(ws, websocket.MessageText, b)
}

// down handles a frame from the inbound worker: gated, rewritten or answered here.
func (c *session) down(b []byte) {
	m, err := protocol.Decode(b)
	if err != nil {
		c.write(c.out, websocket.MessageText, b) // the engine answers malformed frames itself
		return
	}
	switch m.Type {
	case protocol.TypeInvokeFunction:
		c.invoke(m, b)
	case protocol.TypeRegisterFunction, protocol.TypeUnregisterFunction, protocol.TypeRegisterTriggerType, protocol.TypeRegisterTrigger:
		c.register(m)
	default:
		c.write(c.out, websocket.MessageText, b)
	}
}

// invoke gates a call as an engine RBAC listener does (core's gateInvoke), reading the
// function's metadata when a metadata filter could expose it.
func (c *session) invoke(m *protocol.Message, raw []byte) {
	if m.FunctionID == protocol.FnRegisterWorker {
		c.registerWorker(m, raw)
		return
	}
	ns := protocol.DefaultNamespace
	if m.Namespace != nil {
		if strings.TrimSpace(*m.Namespace) == "" {
			c.write(c.out, websocket.MessageText, raw) // answered INVALID_NAMESPACE by the engine
			return
		}
		ns = *m.Namespace
	}
	if !c.needsMetadata(m.FunctionID, ns) {
		c.gate(m, raw, ns, nil)
		return
	}
	if meta, ok := c.p.meta.get(ns, m.FunctionID); ok {
		c.gate(m, raw, ns, meta)
		return
	}
	c.lookup(func() {
		c.gate(m, raw, ns, c.p.metadata(c.ctx, ns, []string{m.FunctionID})[m.FunctionID])
	})
}

// needsMetadata reports whether the decision on id in ns depends on its metadata: no other rule
// allows it, a metadata filter applies in ns and forbidden_functions does not name it.
func (c *session) needsMetadata(id, ns string) bool {
	return c.p.metaNS[ns] && !slices.Contains(c.s.ForbiddenFunctions, id) && !c.p.cfg.RBAC.Allowed(c.s, id, ns, nil)
}

// lookup runs f, which reads metadata, on a goroutine of the pair, so the pump goes on; a pump
// waits while maxLookups are in flight.
func (c *session) lookup(f func()) {
	select {
	case c.lookups <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { <-c.lookups }()
		f()
	}()
}

// gate answers call m FORBIDDEN when the session may not make it, given the function's
// metadata, and otherwise sends it on (to the middleware when it takes it).
func (c *session) gate(m *protocol.Message, raw []byte, ns string, meta json.RawMessage) {
	if why := c.p.cfg.RBAC.Denial(c.s, m.FunctionID, ns, meta); why != "" {
		c.result(m, nil, rbac.Forbidden(Where, m.FunctionID, ns, why))
		return
	}
	if m.FunctionID == protocol.FnListFunctions && m.InvocationID != "" {
		c.mu.Lock()
		c.discovery[m.InvocationID] = true
		c.mu.Unlock()
	}
	if c.p.cfg.MiddlewareFunctionID == "" || strings.HasPrefix(m.FunctionID, "engine::") {
		c.write(c.out, websocket.MessageText, raw)
		return
	}
	c.wg.Add(1)
	go func() { // the pump goes on: the middleware may call back into this connection's functions
		defer c.wg.Done()
		var action json.RawMessage
		if m.Action != nil {
			action, _ = json.Marshal(m.Action)
		}
		data := m.Data
		if len(data) == 0 {
			data = json.RawMessage("null")
		}
		in := rbac.MiddlewareInput{FunctionID: m.FunctionID, Payload: data, Action: action, Context: c.s.Context, Namespace: ns}
		d := 30 * time.Second
		if m.TimeoutMS > 0 {
			d = time.Duration(m.TimeoutMS) * time.Millisecond
		}
		res, perr := c.p.call(c.ctx, c.p.cfg.MiddlewareFunctionID, in, d)
		c.result(m, res, perr)
	}()
}

// result answers call m to the inbound worker (nothing for a void call).
func (c *session) result(m *protocol.Message, res json.RawMessage, perr *protocol.Error) {
	if m.IsVoid() {
		return
	}
	out := &protocol.Message{Type: protocol.TypeInvocationResult, InvocationID: m.InvocationID, FunctionID: m.FunctionID, Error: perr}
	if perr == nil && strings.TrimSpace(string(res)) != "null" {
		out.Result = res
	}
	c.send(c.in, out)
}

// registerWorker refuses a namespace the auth function did not scope the session to, as the
// engine does: the call's FORBIDDEN result, registrationrejected, then close 1008.
func (c *session) registerWorker(m *protocol.Message, raw []byte) {
	var info struct {
		Name      string  `json:"name"`
		Namespace *string `json:"namespace"`
	}
	_ = json.Unmarshal(m.Data, &info)
	ns := protocol.DefaultNamespace
	if info.Namespace != nil {
		ns = *info.Namespace
	}
	if !c.s.MayDeclare(ns) {
		perr := protocol.NewError(errcode.Forbidden, "%s: the auth function scoped this connection to other namespaces than '%s'", Where, ns)
		c.p.log.Warn("worker registration refused", "name", info.Name, "namespace", ns, "code", perr.Code)
		c.result(m, nil, perr)
		c.send(c.in, &protocol.Message{Type: protocol.TypeRegistrationRejected, Code: perr.Code, Namespace: &ns, WorkerName: info.Name})
		_ = c.in.Close(websocket.StatusPolicyViolation, perr.Code)
		c.cancel()
		return
	}
	c.mu.Lock()
	c.ns = ns
	c.registerInv = m.InvocationID
	c.mu.Unlock()
	c.write(c.out, websocket.MessageText, raw)
}

// register gates a registration (rbac.Config.GateRegistration), calling the hooks through the
// proxy's worker connection within the handshake deadline; the frame order is kept. The
// functions the proxy calls to enforce its gate (the auth function, the hooks, the middleware)
// may not be registered through it.
func (c *session) register(m *protocol.Message) {
	hook := func(id string, in json.RawMessage) (json.RawMessage, error) {
		res, perr := c.p.call(c.ctx, id, in, c.p.handshake())
		if perr != nil {
			c.p.log.Warn("registration refused: the hook failed", "hook", id, "code", perr.Code, "reason", perr.Message)
			return nil, perr
		}
		return res, nil
	}
	c.mu.Lock()
	ns := c.ns
	c.mu.Unlock()
	var later []string // functions the session registered, to confirm once the engine applied its registrations
	bind := func(id string) string {
		why, own := c.bind(ns, id)
		if why != "" && own {
			later = append(later, id)
			return ""
		}
		return why
	}
	r := c.p.cfg.RBAC.GateRegistration(c.s, m, hook, bind)
	if r == nil && m.Type == protocol.TypeRegisterFunction && slices.Contains(c.p.gateFunctions(), m.ID) {
		r = &rbac.Refusal{What: m.ID, Why: "the rbac-proxy calls it to enforce its gate; only a trusted worker (not a session of the proxy) may serve it"}
	}
	if r == nil && m.Type == protocol.TypeRegisterTriggerType {
		if why := c.provided(ns, m.ID); why != "" {
			r = &rbac.Refusal{What: "trigger type " + m.ID, Why: why}
		}
	}
	if r != nil {
		c.refuse(m, ns, r)
		return
	}
	switch m.Type {
	case protocol.TypeRegisterFunction:
		c.mu.Lock()
		c.own[m.ID] = true
		c.mu.Unlock()
	case protocol.TypeUnregisterFunction:
		c.mu.Lock()
		delete(c.own, m.ID)
		c.mu.Unlock()
	}
	if len(later) == 0 {
		c.send(c.out, m)
		return
	}
	// Held on a goroutine of the pair, so the pump goes on to the worker's
	// engine::workers::register, which SDKs send after their registrations.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for _, id := range later {
			if why := c.confirmOwn(ns, id); why != "" {
				c.refuse(m, ns, &rbac.Refusal{What: "trigger " + m.ID, Why: "it names " + id + ", which may not be called by this session: " + why})
				return
			}
		}
		c.send(c.out, m)
	}()
}

// provided is why the session may not provide trigger type id in ns: another connection
// provides it (the engine sees every proxied connection as trusted, so the proxy keeps its
// sessions from taking a type over), or the engine could not tell; "" when none does.
func (c *session) provided(ns, id string) string {
	res, perr := c.p.call(c.ctx, fnListTriggerTypes, nil, c.p.handshake())
	if perr != nil {
		return "the proxy could not read the engine's trigger types: " + perr.Code
	}
	var list struct {
		Triggers []struct {
			ID        string `json:"id"`
			Namespace string `json:"namespace"`
			WorkerID  string `json:"worker_id"`
		} `json:"triggers"`
	}
	if err := json.Unmarshal(res, &list); err != nil {
		return "the proxy could not read the engine's trigger types: " + err.Error()
	}
	c.mu.Lock()
	self := c.engineID
	c.mu.Unlock()
	for _, t := range list.Triggers {
		if t.ID == id && t.Namespace == ns && t.WorkerID != self {
			return "worker " + t.WorkerID + " provides it; a session of the proxy may not take a trigger type over"
		}
	}
	return ""
}

// refuse logs registration m refused for r and answers the worker as the engine would.
func (c *session) refuse(m *protocol.Message, ns string, r *rbac.Refusal) {
	c.p.log.Warn("registration refused", "what", r.What, "namespace", ns, "reason", r.Why)
	if f := rbac.Rejection(m, ns, Where, r); f != nil {
		c.send(c.in, f)
	}
}

// bind is why the session may not have a trigger's provider call function id of ns, judged on
// the function's metadata (rbac.Config.Denial), and whether the session registered id itself
// (then confirmOwn decides: a function it serves may be bound). A provider calls a trigger's
// functions with the engine's trusted rights, so nothing else may be bound.
func (c *session) bind(ns, id string) (why string, own bool) {
	var meta json.RawMessage
	if c.needsMetadata(id, ns) {
		meta = c.p.metadata(c.ctx, ns, []string{id})[id]
	}
	if why = c.p.cfg.RBAC.Denial(c.s, id, ns, meta); why == "" {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return why, c.own[id]
}

// confirmOwn is "" when the engine kept the session's registration of function id of ns, else
// why not. It waits for the session's engine::workers::register to be answered (the engine
// parks registrations until then) and then for a barrier call: the engine applies a
// connection's frames in order and answers an inline function in that order, so once the
// barrier's result is back any rejection of the function's registration has been read (up).
func (c *session) confirmOwn(ns, id string) string {
	t := time.NewTimer(c.p.handshake())
	defer t.Stop()
	select {
	case <-c.registeredCh:
	case <-t.C:
		return "the worker did not register (engine::workers::register) within " + c.p.handshake().String() + ", so the engine has not applied its registration of it"
	case <-c.ctx.Done():
		return "the session ended"
	}
	if perr := c.barrier(ns, id); perr != nil {
		return "the engine did not confirm the session serves it: " + perr.Code
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.own[id] {
		return "the engine rejected the session's registration of it"
	}
	return ""
}

// barrier calls engine::functions::info for id in ns on the session's engine connection (the
// engine answers it in the order of that connection's frames) and waits for its result within
// the handshake deadline.
func (c *session) barrier(ns, id string) *protocol.Error {
	inv := uuid.NewString()
	ch := make(chan *protocol.Message, 1)
	c.mu.Lock()
	c.barriers[inv] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.barriers, inv)
		c.mu.Unlock()
	}()
	data, _ := json.Marshal(map[string]string{"function_id": id, "namespace": ns})
	c.send(c.out, &protocol.Message{Type: protocol.TypeInvokeFunction, InvocationID: inv, FunctionID: fnFunctionInfo, Data: data})
	t := time.NewTimer(c.p.handshake())
	defer t.Stop()
	select {
	case res := <-ch:
		return res.Error
	case <-t.C:
		return protocol.NewError(errcode.ClientTimeout, "%s did not answer within %v", fnFunctionInfo, c.p.handshake())
	case <-c.ctx.Done():
		return protocol.NewError(errcode.NotConnected, "the session ended")
	}
}

// up handles a frame from the engine: calls lose the session's registration prefix, and
// engine::functions::list results list only what the session may call.
func (c *session) up(b []byte) {
	m, err := protocol.Decode(b)
	if err != nil {
		c.write(c.in, websocket.MessageText, b)
		return
	}
	switch m.Type {
	case protocol.TypeWorkerRegistered:
		c.mu.Lock()
		c.engineID = m.WorkerID
		c.mu.Unlock()
	case protocol.TypeInvokeFunction:
		if local := c.s.Local(m.FunctionID); local != m.FunctionID {
			m.FunctionID = local
			c.send(c.in, m)
			return
		}
	case protocol.TypeRegistrationRejected:
		c.mu.Lock()
		delete(c.own, m.FunctionID)
		c.mu.Unlock()
	case protocol.TypeInvocationResult:
		c.mu.Lock()
		if ch, ok := c.barriers[m.InvocationID]; ok {
			c.mu.Unlock()
			ch <- m
			return
		}
		if m.InvocationID != "" && m.InvocationID == c.registerInv {
			c.registerInv = ""
			select {
			case <-c.registeredCh: // registered again: it stays registered
			default:
				if m.Error == nil {
					close(c.registeredCh)
				}
			}
		}
		listed := c.discovery[m.InvocationID]
		delete(c.discovery, m.InvocationID)
		c.mu.Unlock()
		if listed && m.Error == nil && len(m.Result) > 0 {
			if len(c.p.metaNS) == 0 {
				m.Result = c.filterFunctions(m.Result)
				c.send(c.in, m)
				return
			}
			c.lookup(func() {
				m.Result = c.filterFunctions(m.Result)
				c.send(c.in, m)
			})
			return
		}
	}
	c.write(c.in, websocket.MessageText, b)
}

// filterFunctions keeps the entries of an engine::functions::list result the session may call
// (the rows carry no metadata: it is read for those a metadata filter decides), every other
// field of the result and of the entries as the engine sent them.
func (c *session) filterFunctions(res json.RawMessage) json.RawMessage {
	var top map[string]json.RawMessage
	var list []json.RawMessage
	if json.Unmarshal(res, &top) != nil || json.Unmarshal(top["functions"], &list) != nil {
		return json.RawMessage(`{"functions":[]}`) // fail closed: nothing unfiltered gets through
	}
	type row struct {
		FunctionID string `json:"function_id"`
		Namespace  string `json:"namespace"`
	}
	rows := make([]row, len(list))
	need := map[string][]string{} // by namespace, the rows decided by their metadata
	for i, e := range list {
		_ = json.Unmarshal(e, &rows[i])
		if rows[i].Namespace == "" {
			rows[i].Namespace = protocol.DefaultNamespace
		}
		if c.needsMetadata(rows[i].FunctionID, rows[i].Namespace) {
			need[rows[i].Namespace] = append(need[rows[i].Namespace], rows[i].FunctionID)
		}
	}
	meta := map[string]map[string]json.RawMessage{}
	for ns, ids := range need {
		meta[ns] = c.p.metadata(c.ctx, ns, ids)
	}
	kept := []json.RawMessage{}
	for i, e := range list {
		if c.p.cfg.RBAC.Allowed(c.s, rows[i].FunctionID, rows[i].Namespace, meta[rows[i].Namespace][rows[i].FunctionID]) {
			kept = append(kept, e)
		}
	}
	top["functions"], _ = json.Marshal(kept)
	out, _ := json.Marshal(top)
	return out
}
