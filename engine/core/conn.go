package core

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/httpfn"
	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/internal/wire"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

// workerInfo is what engine::workers::register tells about a worker. Unknown keys are dropped.
type workerInfo struct {
	Runtime     string  `json:"runtime"`
	Version     string  `json:"version"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	OS          string  `json:"os"`
	PID         int     `json:"pid"`
	Isolation   string  `json:"isolation"`
	Namespace   *string `json:"namespace"`
}

// conn is one worker connection. Frames to it go through a bounded queue that one writer
// goroutine drains with a write deadline (batchconn.Queue), so no sender ever waits on a slow
// peer: a peer that falls behind by more than Options.QueueBytes/QueueFrames, or takes longer
// than Options.WriteTimeout for one socket write, is closed as SLOW_CONSUMER.
type conn struct {
	e           *Engine
	ws          *batchconn.Conn
	q           *batchconn.Queue
	id          string
	token       string        // presented in the handshake; compared, never shown
	reattach    string        // the secret its worker presents in a reattach frame from its next connection
	dropped     chan struct{} // closed once drop has forgotten it
	owner       bool
	l           *listener     // the listener it connected to
	session     *rbac.Session // its rights on a gated listener (middleware or rbac), else nil; never changes
	connectedAt time.Time
	ctx         context.Context
	cancel      context.CancelFunc
	closing     atomic.Bool  // shut was called: it closes the socket
	inflight    atomic.Int32 // engine-served calls running for this connection
	serving     atomic.Int32 // calls forwarded to this worker and not settled: len(pending)
	hold        holder       // its part of the engine's frame budget
	holdFn      func(n int) bool
	binaryWarn  atomic.Bool // a refused binary frame was logged at WARN (once per connection)

	mu         sync.Mutex
	registered bool
	namespace  string
	info       workerInfo
	parked     []*protocol.Message
	graceTimer *time.Timer
	regTimer   *time.Timer
	pending    map[string]*pendingCall // calls forwarded to this worker, by engine invocation id
	calls      map[string]*conn        // calls this connection made that a worker serves: engine invocation id -> worker; nil once gone
}

var errConnGone = errors.New("connection closed")

func (c *conn) nsOrDefault() string {
	if c.namespace == "" {
		return protocol.DefaultNamespace
	}
	return c.namespace
}

// send queues a frame for the peer without waiting for it to be written, encoding it into a
// buffer a written frame left. A frame that would overflow a non-empty queue closes the
// connection as SLOW_CONSUMER instead.
func (c *conn) send(m *protocol.Message) error {
	err := c.q.Push(wire.AppendEncode(c.q.Buf(), m))
	if err == nil {
		return nil
	}
	if full, ok := err.(*batchconn.FullError); ok {
		lim := c.e.opts
		c.kill(errcode.SlowConsumer, fmt.Sprintf("the peer does not read: %s, the limit is %d frames or %d bytes",
			full, lim.QueueFrames, lim.QueueBytes))
	}
	return errConnGone
}

// closeAfterFlush closes the connection with status and reason once the frames already queued
// are written; nothing queued later is sent.
func (c *conn) closeAfterFlush(status int, reason string) {
	c.q.StopAfter(func() { c.shut(status, reason) })
}

// writeLoop runs the connection's writer until the connection ends.
func (c *conn) writeLoop() {
	err := c.q.Run()
	var werr *batchconn.WriteError
	if !errors.As(err, &werr) {
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.kill(errcode.SlowConsumer, fmt.Sprintf("%d bytes of frames were not taken within the write deadline of %s", werr.Bytes, c.e.opts.WriteTimeout))
	} else {
		c.kill("", "")
	}
}

// kill closes the socket at once; code, when set, is logged as the reason.
func (c *conn) kill(code, msg string) {
	if code != "" && c.ctx.Err() == nil {
		c.e.log.Warn("closing connection", "code", code, "worker_id", c.id, "name", c.name(), "reason", msg)
	}
	c.q.Stop(errConnGone)
	c.closing.Store(true)
	c.cancel()
	_ = c.ws.Close()
}

// shut closes the connection with a close frame (status, reason), giving the peer a second to
// answer it.
func (c *conn) shut(status int, reason string) {
	if c.closing.Swap(true) {
		return
	}
	c.q.Stop(errConnGone)
	go func() {
		done := make(chan struct{})
		go func() { _ = c.ws.CloseStatus(status, batchconn.CloseReason(reason), time.Second); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
		_ = c.ws.Close()
	}()
}

// sessionIP is the peer's address of a connection with a session, else "".
func (c *conn) sessionIP() string {
	if c.session == nil {
		return ""
	}
	return c.session.IP
}

// localID is the id c's worker knows function id by (without its registration prefix).
func (c *conn) localID(id string) string { return c.session.Local(id) }

func (c *conn) name() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info.Name
}

func (c *conn) caller() Caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Caller{WorkerID: c.id, Name: c.info.Name, Namespace: c.namespace, Owner: c.owner, conn: c}
}

var errFrameBudget = errors.New("frame budget spent")

// reuseFrameBuf is the largest read buffer a connection keeps for its next frame.
const reuseFrameBuf = 64 << 10

// readFrame reads one message, taking the memory it takes from the engine's frame budget as
// its bytes arrive. buf is the buffer of the previous message, whose capacity c already holds:
// a message that fits in it takes nothing (it is reused when small, reuseFrameBuf: Decode never
// keeps a reference into its input). It reads without a context: whatever ends the connection
// closes the socket, which ends the read.
func (e *Engine) readFrame(c *conn, buf []byte) (typ byte, b []byte, err error) {
	typ, b, err = c.ws.ReadMessage(buf, c.holdFn)
	if errors.Is(err, batchconn.ErrHeld) {
		err = errFrameBudget
	}
	return typ, b, err
}

func (e *Engine) serveConn(ws *batchconn.Conn, token string, l *listener, session *rbac.Session) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{e: e, ws: ws, q: batchconn.NewQueue(ws, false, e.opts.QueueBytes, e.opts.QueueFrames), id: newUUID(),
		token: token, reattach: newUUID(), dropped: make(chan struct{}), l: l, session: session, connectedAt: time.Now(), ctx: ctx, cancel: cancel,
		pending: map[string]*pendingCall{}, calls: map[string]*conn{}}
	c.owner = e.isOwnerToken(token)
	c.holdFn = func(n int) bool { return e.frames.take(&c.hold, int64(n)) }
	c.hold.evict = func() {
		c.budgetExceeded(fmt.Sprintf("the engine's %d MiB frame budget is spent and this connection held the most; try again later", e.opts.FrameBudget>>20))
	}
	e.mu.Lock()
	e.conns[c.id] = c
	e.mu.Unlock()
	e.log.Debug("worker connected", "worker_id", c.id)
	go c.writeLoop()
	c.mu.Lock()
	c.regTimer = time.AfterFunc(e.opts.RegisterTimeout, func() { e.registrationExpired(c) })
	c.mu.Unlock()
	_ = c.send(&protocol.Message{Type: protocol.TypeWorkerRegistered, WorkerID: c.id, ReattachToken: c.reattach})
	var buf []byte
	for {
		typ, b, err := e.readFrame(c, buf)
		if err != nil {
			switch {
			case errors.Is(err, errFrameBudget):
				e.frames.mu.Lock()
				why := c.hold.refused
				e.frames.mu.Unlock()
				c.budgetExceeded(why + "; try again later")
			case errors.Is(err, batchconn.ErrFrameTimeout):
				msg := strings.TrimPrefix(err.Error(), batchconn.ErrFrameTimeout.Error()+": ")
				e.log.Warn("closing connection", "code", errcode.FrameTimeout, "worker_id", c.id, "name", c.name(), "reason", msg)
				c.shut(batchconn.StatusPolicyViolation, errcode.FrameTimeout+": a message did not arrive in time: "+msg)
			}
			break
		}
		e.handleRaw(c, typ, b)
		buf = nil
		if cap(b) <= reuseFrameBuf {
			buf = b[:0]
		}
		e.frames.keep(&c.hold, int64(cap(buf))) // the reused buffer stays held
	}
	e.frames.keep(&c.hold, 0)
	e.drop(c)
	close(c.dropped)
	if !c.closing.Load() {
		_ = ws.Close()
	}
}

// budgetExceeded closes c with 1013 FRAME_BUDGET_EXCEEDED.
func (c *conn) budgetExceeded(msg string) {
	if c.closing.Load() {
		return
	}
	c.e.log.Warn("closing connection", "code", errcode.FrameBudgetExceeded, "worker_id", c.id, "name", c.name(), "reason", msg)
	c.shut(batchconn.StatusTryAgainLater, errcode.FrameBudgetExceeded+": "+msg)
}

// handleRaw handles one frame. Protocol messages come in text frames only, on every
// connection: a binary frame carries telemetry (the SDKs' OTLP, MTRC and LOGS prefixes) and
// nothing else, so a gate that checks the text frames in front of it (an RBAC listener, the
// rbac-proxy) can never be gone around in a binary frame. Any other binary frame is dropped,
// with a WARN naming the connection (once per connection, then at DEBUG).
func (e *Engine) handleRaw(c *conn, typ byte, b []byte) {
	if typ == batchconn.OpBinary {
		if !e.telemetry(c.id, b) {
			level := slog.LevelDebug
			if !c.binaryWarn.Swap(true) {
				level = slog.LevelWarn
			}
			e.log.Log(context.Background(), level, "ignoring frame", "code", errcode.Unsupported, "worker_id", c.id, "name", c.name(),
				"reason", "a binary frame that is not telemetry (OTLP, MTRC or LOGS prefix); protocol messages are read from text frames only")
		}
		return
	}
	// Borrowed: the frames forwarded to another connection, invocations and results, are
	// encoded again before b is reused, and handleFrame makes every other frame Own its fields.
	m, err := wire.DecodeBorrowed(b)
	if err != nil {
		e.log.Debug("ignoring frame", "worker_id", c.id, "err", err)
		return
	}
	e.handleFrame(c, m)
}

// registrationExpired closes a connection that never registered within the deadline.
func (e *Engine) registrationExpired(c *conn) {
	c.mu.Lock()
	done := c.registered || len(c.parked) > 0
	c.mu.Unlock()
	if done || c.ctx.Err() != nil {
		return
	}
	msg := fmt.Sprintf("no engine::workers::register and no function registered within %s", e.opts.RegisterTimeout)
	e.log.Warn("closing connection", "code", errcode.RegistrationTimeout, "worker_id", c.id, "reason", msg)
	c.shut(batchconn.StatusPolicyViolation, errcode.RegistrationTimeout+": "+msg)
}

// drop forgets a closed connection: its functions go, in-flight calls to it fail, and the calls
// it made that workers still serve are forgotten (their replies are dropped; the protocol has no
// cancel frame to tell the worker).
func (e *Engine) drop(c *conn) {
	c.cancel()
	c.q.Stop(errConnGone)
	defer c.failPending()
	defer c.forgetCalls()
	defer e.triggers.PeerGone(c)
	e.observers.RemoveOwner(c.id)
	e.chans.CreatorLeft(c.id)
	e.mu.Lock()
	delete(e.conns, c.id)
	gone := 0
	for k := range e.funcs {
		if e.removeInstance(k, c) {
			gone++
		}
	}
	e.mu.Unlock()
	if gone > 0 {
		e.functionsChanged()
		e.recheckTriggers()
	}
	c.mu.Lock()
	if c.graceTimer != nil {
		c.graceTimer.Stop()
	}
	c.regTimer.Stop()
	c.mu.Unlock()
	e.log.Debug("worker disconnected", "worker_id", c.id, "name", c.info.Name)
}

func (e *Engine) handleFrame(c *conn, m *protocol.Message) {
	switch m.Type {
	case protocol.TypeInvokeFunction:
		if c.session != nil && m.FunctionID != protocol.FnRegisterWorker && e.gateInvoke(c, m) {
			return
		}
		enqueue := m.Action != nil && m.Action.Type == "enqueue"
		if m.FunctionID != protocol.FnRegisterWorker && !enqueue && e.forwardAsync(c, m) {
			wire.Recycle(m) // forwarded: the frame sent on copied what it needed
			return
		}
		wire.Own(m) // from here on m may outlive the read buffer
		if m.FunctionID == protocol.FnRegisterWorker {
			e.registerWorker(c, m)
			return
		}
		if enqueue {
			e.enqueue(c, m)
			return
		}
		if e.isInline(m.FunctionID) {
			e.handleInvoke(c, m)
			return
		}
		if n := c.inflight.Add(1); int(n) > e.opts.MaxInflight {
			c.inflight.Add(-1)
			c.sendResult(m, nil, protocol.NewError(errcode.TooManyCalls,
				"this connection already has %d engine-served calls in flight; wait for some to finish", e.opts.MaxInflight))
			return
		}
		go func() {
			defer c.inflight.Add(-1)
			e.handleInvoke(c, m)
		}()
	case protocol.TypeInvocationResult:
		if pc := c.take(m.InvocationID); pc != nil {
			switch {
			case m.Error != nil && e.reroute(c, pc, m.Error):
			case m.Error != nil:
				pc.deliver(nil, m.Error)
			default:
				res := m.Result
				if pc.ch != nil {
					res = bytes.Clone(res) // an engine call keeps it past the read buffer
				}
				pc.deliver(res, nil)
			}
		}
		wire.Recycle(m) // deliver keeps only Result and Error, not m (Error owns its bytes)
	case protocol.TypeRegisterFunction, protocol.TypeUnregisterFunction, protocol.TypeRegisterTriggerType,
		protocol.TypeUnregisterTriggerType, protocol.TypeRegisterTrigger, protocol.TypeUnregisterTrigger:
		wire.Own(m) // registrations are kept
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
	case protocol.TypeReattach:
		e.reattachFrom(c, m.PreviousWorkerID, m.ReattachToken)
	default:
		wire.Own(m)
		e.handleEventFrame(c, m)
	}
}

// isInline reports whether id is a built-in served on the caller's read loop (HandleInline).
func (e *Engine) isInline(id string) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.builtins[id].inline
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
	if c.session != nil && !e.gateRegistration(c, ns, m) {
		return
	}
	if isTriggerRegistration(m) {
		e.triggers.Handle(c, ns, m)
		return
	}
	if m.Type == protocol.TypeUnregisterFunction {
		e.mu.Lock()
		gone := e.removeInstance(fkey{ns, m.ID}, c)
		e.mu.Unlock()
		if gone {
			e.functionsChanged()
			e.recheckTriggers()
		}
		return
	}
	if m.ID == "" {
		return
	}
	if reserved(m.ID) && !e.mayServeEngineID(c, ns, m.ID) {
		_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: errcode.ReservedNamespace,
			Namespace: &ns, FunctionID: m.ID, OwnerWorkerID: "engine"})
		return
	}
	var hf *httpfn.Function
	if wire.HasInvocation(m) {
		var err error
		if hf, err = e.registerHTTP(c, m.ID, m.Invocation); err != nil {
			ce := errcode.As(err, errcode.HTTPInvocationInvalid)
			e.log.Warn("function registration refused", "code", ce.Code, "function", m.ID, "namespace", ns, "worker_id", c.id, "reason", ce.Message)
			_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: ce.Code,
				Namespace: &ns, FunctionID: m.ID, OwnerWorkerID: "engine"})
			return
		}
	}
	if m.Protected && c.token == "" {
		e.log.Warn("function registration refused", "code", errcode.TokenRequired, "function", m.ID, "namespace", ns,
			"reason", "a protected function needs a worker that connected with a token")
		_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: errcode.TokenRequired,
			Namespace: &ns, FunctionID: m.ID})
		return
	}
	e.mu.Lock()
	if code, owner, msg := e.checkClaim(c, ns, m.ID); code != "" {
		e.mu.Unlock()
		e.log.Warn("function registration refused", "code", code, "function", m.ID, "namespace", ns, "worker_id", c.id, "reason", msg)
		_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: code,
			Namespace: &ns, FunctionID: m.ID, OwnerWorkerID: owner})
		return
	}
	k := fkey{ns, m.ID}
	if f := e.funcs[k]; f != nil && f.conn != c && sameRights(f, c, m) {
		f.addInstance(c, m)
		e.mu.Unlock()
		e.log.Info("function served by one more worker", "function", m.ID, "namespace", ns, "worker_id", c.id, "instances", len(f.more)+1)
		return
	}
	if f := e.funcs[k]; f != nil && f.conn != c {
		owner := f.conn.id
		e.mu.Unlock()
		e.log.Warn("function registration refused", "code", errcode.FunctionNamespaceConflict, "function", m.ID, "namespace", ns)
		_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: errcode.FunctionNamespaceConflict,
			Namespace: &ns, FunctionID: m.ID, OwnerWorkerID: owner})
		return
	}
	e.funcs[k] = &fnEntry{conn: c, frame: m, http: hf}
	e.mu.Unlock()
	e.functionsChanged()
	e.recheckTriggers()
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
	if perr == nil && c.session != nil && !c.session.MayDeclare(ns) {
		perr = protocol.NewError(errcode.Forbidden, "listener %s: the auth function scoped this connection to other namespaces than '%s'", c.l.Name, ns)
	}
	if perr != nil {
		e.log.Warn("worker registration refused", "worker_id", c.id, "name", info.Name, "namespace", ns, "code", perr.Code)
		c.sendResult(m, nil, perr)
		_ = c.send(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: perr.Code, Namespace: &ns, WorkerName: info.Name})
		c.closeAfterFlush(batchconn.StatusPolicyViolation, perr.Code)
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
	if e.obs != nil {
		e.obs.WorkerRegistered(c.id)
	}
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
		out.Result = resultField(res)
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
			"namespace '%s' is protected by a project token and the worker presented none; start it with III_TOKEN_FILE naming the token file (or III_TOKEN holding the token)", ns)
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
	if tokenMatches(e.opts.OwnerTokenFile, token) {
		return true
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
		res, perr = e.dispatch(c.ctx, c.caller(), ns, m.FunctionID, m.Data, m.Metadata, traceCtx{m.Traceparent, m.Baggage}, e.callTimeout(m.TimeoutMS), m.IsVoid())
	}
	c.sendResult(m, res, perr)
}

// callTimeout is the timeout of a call that names timeoutMS: Options.MaxCallTimeout when it
// names none or more.
func (e *Engine) callTimeout(timeoutMS int64) time.Duration {
	d := time.Duration(timeoutMS) * time.Millisecond
	if timeoutMS <= 0 || timeoutMS > int64(e.opts.MaxCallTimeout/time.Millisecond) {
		return e.opts.MaxCallTimeout
	}
	return d
}
