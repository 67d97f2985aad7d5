package core

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
)

// workerInfo is what engine::workers::register tells about a worker. Unknown keys are dropped.
type workerInfo struct {
	Runtime     string  `json:"runtime"`
	Version     string  `json:"version"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	OS          string  `json:"os"`
	PID         int     `json:"pid"`
	Namespace   *string `json:"namespace"`
}

// conn is one worker connection.
type conn struct {
	e           *Engine
	ws          *websocket.Conn
	id          string
	token       string // presented in the handshake; compared, never shown
	owner       bool
	connectedAt time.Time
	ctx         context.Context
	cancel      context.CancelFunc
	writeMu     sync.Mutex // cheaper under contention than the socket's own channel lock

	mu         sync.Mutex
	registered bool
	namespace  string
	info       workerInfo
	parked     []*protocol.Message
	graceTimer *time.Timer
	pending    map[string]*pendingCall // calls forwarded to this worker, by engine invocation id
}

func (c *conn) nsOrDefault() string {
	if c.namespace == "" {
		return protocol.DefaultNamespace
	}
	return c.namespace
}

func (c *conn) send(m *protocol.Message) error {
	b, err := protocol.Encode(m)
	if err != nil {
		return err
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	return c.ws.Write(context.Background(), websocket.MessageText, b)
}

func (c *conn) caller() Caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Caller{WorkerID: c.id, Name: c.info.Name, Namespace: c.namespace, Owner: c.owner}
}

func (e *Engine) serveConn(parent context.Context, ws *websocket.Conn, token string) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{e: e, ws: ws, id: newUUID(), token: token, connectedAt: time.Now(), ctx: ctx, cancel: cancel,
		pending: map[string]*pendingCall{}}
	c.owner = e.isOwnerToken(token)
	e.mu.Lock()
	e.conns[c.id] = c
	e.mu.Unlock()
	e.log.Debug("worker connected", "worker_id", c.id)
	_ = c.send(&protocol.Message{Type: protocol.TypeWorkerRegistered, WorkerID: c.id, ReattachToken: newUUID()})
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageBinary && len(b) >= 4 {
			switch string(b[:4]) {
			case "OTLP", "MTRC", "LOGS":
				continue
			}
		}
		m, err := protocol.Decode(b)
		if err != nil {
			e.log.Debug("ignoring frame", "worker_id", c.id, "err", err)
			continue
		}
		e.handleFrame(c, m)
	}
	e.drop(c)
	ws.CloseNow()
}

// drop forgets a closed connection: its functions go, in-flight calls to it fail.
func (e *Engine) drop(c *conn) {
	c.cancel()
	defer c.failPending()
	e.mu.Lock()
	delete(e.conns, c.id)
	for k, f := range e.funcs {
		if f.conn == c {
			delete(e.funcs, k)
		}
	}
	e.mu.Unlock()
	c.mu.Lock()
	if c.graceTimer != nil {
		c.graceTimer.Stop()
	}
	c.mu.Unlock()
	e.log.Debug("worker disconnected", "worker_id", c.id, "name", c.info.Name)
}

func (e *Engine) handleFrame(c *conn, m *protocol.Message) {
	switch m.Type {
	case protocol.TypeInvokeFunction:
		if m.FunctionID == protocol.FnRegisterWorker {
			e.registerWorker(c, m)
			return
		}
		if !e.forwardAsync(c, m) {
			go e.handleInvoke(c, m)
		}
	case protocol.TypeInvocationResult:
		if pc := c.take(m.InvocationID); pc != nil {
			if m.Error != nil {
				pc.deliver(nil, m.Error)
			} else {
				pc.deliver(m.Result, nil)
			}
		}
	case protocol.TypeRegisterFunction, protocol.TypeUnregisterFunction:
		c.mu.Lock()
		if !c.registered {
			c.parked = append(c.parked, m)
			if c.graceTimer == nil {
				c.graceTimer = time.AfterFunc(e.opts.Grace, func() { e.graceExpired(c) })
			}
			c.mu.Unlock()
			return
		}
		ns := c.nsOrDefault()
		c.mu.Unlock()
		e.applyRegistration(c, ns, m)
	case protocol.TypePing:
		_ = c.send(&protocol.Message{Type: protocol.TypePong})
	}
}

func (e *Engine) graceExpired(c *conn) {
	c.mu.Lock()
	if c.registered || c.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.registered = true
	parked := c.parked
	c.parked = nil
	c.mu.Unlock()
	for _, m := range parked {
		e.applyRegistration(c, protocol.DefaultNamespace, m)
	}
}

func (e *Engine) applyRegistration(c *conn, ns string, m *protocol.Message) {
	if m.Type == protocol.TypeUnregisterFunction {
		e.mu.Lock()
		if f := e.funcs[fkey{ns, m.ID}]; f != nil && f.conn == c {
			delete(e.funcs, fkey{ns, m.ID})
		}
		e.mu.Unlock()
		return
	}
	if m.ID == "" {
		return
	}
	if reserved(m.ID) {
		_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: errcode.ReservedNamespace,
			Namespace: &ns, FunctionID: m.ID, OwnerWorkerID: "engine"})
		return
	}
	e.mu.Lock()
	k := fkey{ns, m.ID}
	if f := e.funcs[k]; f != nil && f.conn != c {
		owner := f.conn.id
		e.mu.Unlock()
		e.log.Warn("function registration refused", "code", errcode.FunctionNamespaceConflict, "function", m.ID, "namespace", ns)
		_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: errcode.FunctionNamespaceConflict,
			Namespace: &ns, FunctionID: m.ID, OwnerWorkerID: owner})
		return
	}
	e.funcs[k] = &fnEntry{conn: c, frame: m}
	e.mu.Unlock()
}

// registerWorker handles engine::workers::register inline, so the registrations parked before
// it are live when its reply is sent.
func (e *Engine) registerWorker(c *conn, m *protocol.Message) {
	var info workerInfo
	_ = json.Unmarshal(m.Data, &info)
	ns, perr := requestNamespace(info.Namespace)
	if perr == nil {
		perr = e.checkToken(c, ns)
	}
	if perr != nil {
		e.log.Warn("worker registration refused", "worker_id", c.id, "name", info.Name, "namespace", ns, "code", perr.Code)
		c.sendResult(m, nil, perr)
		_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: perr.Code, Namespace: &ns, WorkerName: info.Name})
		c.ws.Close(websocket.StatusPolicyViolation, perr.Code)
		return
	}
	c.mu.Lock()
	info.Namespace = nil
	c.info = info
	if !c.registered {
		c.namespace = ns
	}
	c.registered = true
	ns = c.nsOrDefault()
	parked := c.parked
	c.parked = nil
	if c.graceTimer != nil {
		c.graceTimer.Stop()
	}
	c.mu.Unlock()
	for _, pm := range parked {
		e.applyRegistration(c, ns, pm)
	}
	level := slog.LevelInfo
	if strings.HasPrefix(info.Name, "iii-cli:") {
		level = slog.LevelDebug // one-shot `iii call` connections would drown the log
	}
	e.log.Log(context.Background(), level, "worker registered", "worker_id", c.id, "name", info.Name, "namespace", ns)
	res, _ := json.Marshal(map[string]any{"success": true, "worker_id": c.id, "namespace": ns})
	c.sendResult(m, res, nil)
}

// requestNamespace is the namespace a request names: the default one when it names none, and
// INVALID_NAMESPACE (with the blank name) when it names a blank one.
func requestNamespace(ns *string) (string, *protocol.Error) {
	if ns == nil {
		return protocol.DefaultNamespace, nil
	}
	if strings.TrimSpace(*ns) == "" {
		return *ns, protocol.NewError(errcode.InvalidNamespace, "namespace must not be blank")
	}
	return *ns, nil
}

// sendResult answers invocation m with its result or error, unless m is void.
func (c *conn) sendResult(m *protocol.Message, res json.RawMessage, perr *protocol.Error) {
	if m.IsVoid() {
		return
	}
	out := &protocol.Message{Type: protocol.TypeInvocationResult, InvocationID: m.InvocationID, FunctionID: m.FunctionID}
	if perr != nil {
		out.Error = perr
	} else {
		out.Result = res
	}
	_ = c.send(out)
}

// checkToken admits a registration into ns: unprotected namespaces admit everyone, protected ones
// only a connection that presented the namespace's token. Messages never contain the token.
func (e *Engine) checkToken(c *conn, ns string) *protocol.Error {
	pol, ok := e.opts.Namespaces[ns]
	if !ok {
		return nil
	}
	if c.token == "" {
		return protocol.NewError(errcode.TokenRequired,
			"namespace '%s' is protected by a project token and the worker presented none; start it with III_TOKEN_FILE naming the token file", ns)
	}
	if !tokenMatches(pol.TokenFile, c.token) && !tokenMatches(pol.OwnerTokenFile, c.token) {
		return protocol.NewError(errcode.TokenInvalid, "the project token presented for namespace '%s' does not match", ns)
	}
	return nil
}

func (e *Engine) isOwnerToken(token string) bool {
	if token == "" {
		return false
	}
	for _, p := range e.opts.Namespaces {
		if tokenMatches(p.OwnerTokenFile, token) {
			return true
		}
	}
	return false
}

func tokenMatches(file, token string) bool {
	if file == "" {
		return false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	want := strings.TrimSpace(string(b))
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(token)) == 1
}

func (e *Engine) handleInvoke(c *conn, m *protocol.Message) {
	ns, perr := requestNamespace(m.Namespace)
	var res json.RawMessage
	if perr == nil {
		res, perr = e.dispatch(c.ctx, c.caller(), ns, m.FunctionID, m.Data, m.Metadata, time.Duration(m.TimeoutMS)*time.Millisecond, m.IsVoid())
	}
	c.sendResult(m, res, perr)
}
