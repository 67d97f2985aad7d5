package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/backoff"
	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/internal/wire"
)

// Environment variables read by Config defaults.
const (
	EnvURL        = "III_URL"
	EnvNamespace  = "III_NAMESPACE"
	EnvWorkerName = "III_WORKER_NAME"
	EnvTokenFile  = "III_TOKEN_FILE"
	// EnvToken holds the project token itself, as 0.26 SDKs read it; used when no token file is
	// configured (a file is preferred: it never shows in the environment of other processes).
	EnvToken = "III_TOKEN"
)

// DefaultURL is where the engine listens unless configured otherwise.
const DefaultURL = "ws://127.0.0.1:49134"

// DefaultNamespace is the namespace of workers and calls that name none.
const DefaultNamespace = "default"

// DefaultCallTimeout bounds a Call whose context has no deadline.
const DefaultCallTimeout = 30 * time.Second

// MaxFrameBytes is the largest frame either side reads.
const MaxFrameBytes = 64 << 20

// Handler serves one invocation. The returned value is sent as JSON (a json.RawMessage as is);
// a returned *Error is sent as is, any other error as invocation_failed.
type Handler func(ctx context.Context, payload json.RawMessage) (any, error)

// Config says how a Worker connects. Empty fields take their defaults from the environment.
type Config struct {
	URL         string // engine address; default $III_URL, then DefaultURL
	Namespace   string // namespace to register in; default $III_NAMESPACE, then "default"
	Name        string // worker name shown by engine::workers::list; default $III_WORKER_NAME
	Description string // free text shown by engine::workers::list
	Version     string // the worker's own version, reported at registration
	TokenFile   string // file holding the project token; default $III_TOKEN_FILE
	Token       string // the project token, when there is no TokenFile; default $III_TOKEN
	NoReconnect bool   // fail instead of retrying when the connection drops or cannot be made
	Logger      *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = os.Getenv(EnvURL)
	}
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Namespace == "" {
		c.Namespace = os.Getenv(EnvNamespace)
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Name == "" {
		c.Name = os.Getenv(EnvWorkerName)
	}
	if c.TokenFile == "" {
		c.TokenFile = os.Getenv(EnvTokenFile)
	}
	if c.TokenFile == "" && c.Token == "" {
		c.Token = os.Getenv(EnvToken)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// FuncOption sets optional fields of a registered function.
type FuncOption func(*Message)

// WithDescription sets the function's description.
func WithDescription(d string) FuncOption { return func(m *Message) { m.Description = d } }

// WithRequestFormat sets the JSON Schema of the function's payload.
func WithRequestFormat(schema json.RawMessage) FuncOption {
	return func(m *Message) { m.RequestFormat = schema }
}

// WithResponseFormat sets the JSON Schema of the function's result.
func WithResponseFormat(schema json.RawMessage) FuncOption {
	return func(m *Message) { m.ResponseFormat = schema }
}

// Protected makes the engine admit calls to the function only from connections holding this
// worker's token (or one the same token-protected namespace accepts); anyone else gets
// FORBIDDEN. The worker must connect with a token.
func Protected() FuncOption { return func(m *Message) { m.Protected = true } }

type function struct {
	frame   *Message
	handler Handler
}

// Worker is a connection to the engine that serves registered functions and makes calls.
type Worker struct {
	cfg Config

	ctx    context.Context
	cancel context.CancelFunc

	mu           sync.Mutex
	funcs        map[string]*function
	trig         triggerState
	conn         *link
	up           chan struct{}                        // closed while conn is registered
	fns          atomic.Pointer[map[string]*function] // a copy of funcs for serve, replaced on every change
	pending      pendingCalls                         // calls awaiting their invocationresult
	workerID     string
	started      bool
	everUp       bool // the first Start succeeded; later losses reconnect in the background
	reconnecting atomic.Bool
	done         chan struct{}
	err          error
}

// NewWorker returns an unconnected worker. Register functions, then Start it.
func NewWorker(cfg Config) *Worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &Worker{
		cfg: cfg.withDefaults(),
		ctx: ctx, cancel: cancel,
		funcs: map[string]*function{}, up: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// Connect is NewWorker followed by Start, for workers that only call functions or register later.
func Connect(ctx context.Context, cfg Config) (*Worker, error) {
	w := NewWorker(cfg)
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Namespace is the namespace the worker registers in.
func (w *Worker) Namespace() string { return w.cfg.Namespace }

// URL is the engine address the worker connects to.
func (w *Worker) URL() string { return w.cfg.URL }

// WorkerID is the id the engine gave the current connection.
func (w *Worker) WorkerID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.workerID
}

// Done is closed when the worker stops for good: Close, or a refused registration.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Err says why Done closed (nil after Close).
func (w *Worker) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Register adds a function; when connected it is sent to the engine at once, and it is sent
// again after every reconnect.
func (w *Worker) Register(id string, h Handler, opts ...FuncOption) error {
	if id == "" || h == nil {
		return errors.New("register: id and handler are required")
	}
	m := &Message{Type: TypeRegisterFunction, ID: id}
	for _, o := range opts {
		o(m)
	}
	w.mu.Lock()
	w.funcs[id] = &function{frame: m, handler: h}
	w.publishFuncs()
	c := w.liveConnLocked()
	w.mu.Unlock()
	if c != nil {
		return w.write(c, m)
	}
	return nil
}

// Unregister removes a function.
func (w *Worker) Unregister(id string) error {
	w.mu.Lock()
	delete(w.funcs, id)
	w.publishFuncs()
	c := w.liveConnLocked()
	w.mu.Unlock()
	if c != nil {
		return w.write(c, &Message{Type: TypeUnregisterFunction, ID: id})
	}
	return nil
}

// publishFuncs gives serve a copy of funcs, so a served call takes no lock; w.mu is held.
func (w *Worker) publishFuncs() {
	fns := make(map[string]*function, len(w.funcs))
	for id, f := range w.funcs {
		fns[id] = f
	}
	w.fns.Store(&fns)
}

func (w *Worker) liveConn() *link {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.liveConnLocked()
}

func (w *Worker) liveConnLocked() *link {
	select {
	case <-w.up:
		return w.conn
	default:
		return nil
	}
}

// Start connects and registers. It returns once the engine has accepted the worker and every
// function registered so far; without NoReconnect it retries until ctx ends.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker already started")
	}
	w.started = true
	w.mu.Unlock()
	for n := 1; ; n++ {
		err := w.connect(ctx)
		if err == nil {
			return nil
		}
		if w.cfg.NoReconnect || isRefusal(err) {
			w.stop(err)
			return err
		}
		w.cfg.Logger.Warn("connecting to the engine", "url", w.cfg.URL, "err", err)
		select {
		case <-ctx.Done():
			w.stop(ctx.Err())
			return fmt.Errorf("connecting to %s: %w", w.cfg.URL, err)
		case <-w.ctx.Done():
			return errors.New("worker closed")
		case <-time.After(reconnect.Jitter(n)):
		}
	}
}

// reconnect is the SDK's schedule for connecting again: up to 100ms, doubling to 5s, each wait
// drawn at random below that (full jitter), so the workers of a restarted engine spread out.
var reconnect = backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

func isRefusal(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == errcode.TokenRequired || e.Code == errcode.TokenInvalid || e.Code == errcode.Forbidden)
}

// dialHeader carries the project token (read fresh from its file, else Config.Token) as a
// bearer header.
func (w *Worker) dialHeader() (http.Header, error) {
	h := http.Header{}
	token := strings.TrimSpace(w.cfg.Token)
	if w.cfg.TokenFile != "" {
		b, err := os.ReadFile(w.cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("reading the project token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return h, nil
}

// connect dials, sends registrations and engine::workers::register, and waits for its reply.
func (w *Worker) connect(ctx context.Context) error {
	header, err := w.dialHeader()
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := dialLink(dctx, w.cfg.URL, header)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.conn = c
	frames := w.trig.typeFrames()
	for _, f := range w.funcs {
		frames = append(frames, f.frame)
	}
	frames = append(frames, w.trig.triggerFrames()...)
	w.mu.Unlock()
	go w.readLoop(c)
	for _, m := range frames {
		if err := w.write(c, m); err != nil {
			c.close()
			return err
		}
	}
	reg := map[string]any{
		"runtime": "go", "version": w.cfg.Version, "name": w.cfg.Name, "description": w.cfg.Description,
		"os": runtime.GOOS, "pid": os.Getpid(), "namespace": w.cfg.Namespace,
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if _, err := w.callOn(rctx, c, FnRegisterWorker, reg, callOpts{}, 10*time.Second); err != nil {
		_ = c.ws.CloseStatus(batchconn.StatusNormalClosure, "registration failed", time.Second)
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != c {
		return errors.New("connection lost during registration")
	}
	close(w.up)
	w.everUp = true
	go w.keepalive(c)
	return nil
}

// PingInterval is how often the SDK pings the engine; a ping unanswered for as long drops the
// connection, which then reconnects.
const PingInterval = 20 * time.Second

func (w *Worker) keepalive(c *link) {
	t := time.NewTicker(PingInterval)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		current := w.conn == c
		w.mu.Unlock()
		if !current {
			return
		}
		err := c.ws.Ping(PingInterval)
		if err != nil && w.ctx.Err() == nil {
			w.cfg.Logger.Warn("engine did not answer a ping; reconnecting", "err", err)
			c.close()
			return
		}
	}
}

// reuseReadBuf is the largest read buffer readLoop keeps for the next frame.
const reuseReadBuf = 64 << 10

// readMessage reads one message into buf's memory, growing it as needed. Decode never keeps a
// reference into its input, so the buffer serves the next message too.
func readMessage(ws *batchconn.Conn, buf []byte) ([]byte, error) {
	_, b, err := ws.ReadMessage(buf, nil)
	return b, err
}

// readLoop dispatches frames of one connection until it fails, then reconnects unless stopped.
func (w *Worker) readLoop(c *link) {
	// Reads take no context (a cancellable one costs a registration per frame); closing the
	// worker closes the socket instead, which ends the read.
	stop := context.AfterFunc(w.ctx, c.close)
	defer stop()
	var buf []byte
	for {
		b, err := readMessage(c.ws, buf)
		if err != nil {
			break
		}
		if buf = b; cap(b) > reuseReadBuf {
			buf = nil
		}
		m, err := Decode(b)
		if err != nil {
			w.cfg.Logger.Debug("ignoring frame", "err", err)
			continue
		}
		switch m.Type {
		case TypeInvocationResult:
			if !w.pending.settle(m.InvocationID, m) {
				wire.Recycle(m)
			}
		case TypeInvokeFunction:
			go w.serve(c, m)
		case TypeWorkerRegistered:
			w.mu.Lock()
			w.workerID = m.WorkerID
			w.mu.Unlock()
		case TypePing:
			_ = w.write(c, &Message{Type: TypePong})
		case TypeRegistrationRejected:
			w.cfg.Logger.Warn("registration rejected", "code", m.Code, "function", m.FunctionID, "namespace", m.NamespaceOr(""))
		case TypeRegisterTrigger, TypeUnregisterTrigger, TypeTriggerRegistrationResult:
			w.onTriggerFrame(c, m)
		}
	}
	w.mu.Lock()
	if w.conn == c {
		w.conn = nil
		select {
		case <-w.up:
			w.up = make(chan struct{})
		default:
		}
	}
	registered := w.err == nil && w.everUp
	w.mu.Unlock()
	c.close() // first: a call that registers after the sweep below fails on its write
	w.pending.settleAll()
	if w.ctx.Err() != nil || w.cfg.NoReconnect {
		if w.cfg.NoReconnect {
			w.stop(errors.New("connection to the engine closed"))
		}
		return
	}
	if registered {
		go w.reconnect()
	}
}

// reconnect retries until connected again, the worker closes, or registration is refused. Only
// one reconnect loop runs at a time; a connection lost while it finishes is picked up again.
func (w *Worker) reconnect() {
	for {
		if !w.reconnecting.CompareAndSwap(false, true) {
			return
		}
		w.reconnectLoop()
		w.reconnecting.Store(false)
		select {
		case <-w.done:
			return
		default:
		}
		if w.ctx.Err() != nil || w.liveConn() != nil {
			return
		}
	}
}

func (w *Worker) reconnectLoop() {
	for n := 1; ; {
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(reconnect.Jitter(n)):
		}
		if w.liveConn() != nil {
			return
		}
		err := w.connect(w.ctx)
		if err == nil {
			w.cfg.Logger.Info("reconnected to the engine", "url", w.cfg.URL)
			continue
		}
		if isRefusal(err) {
			w.stop(err)
			return
		}
		n++
	}
}

func (w *Worker) serve(c *link, m *Message) {
	defer wire.Recycle(m) // the reply is encoded before serve returns; the handler got m.Data only
	var f *function
	if fns := w.fns.Load(); fns != nil {
		f = (*fns)[m.FunctionID]
	}
	var res any
	var err error
	if f == nil {
		err = NewError(errcode.FunctionNotFound, "Function %s not found in namespace %s.", m.FunctionID, w.cfg.Namespace)
	} else {
		res, err = invokeHandler(w.ctx, f.handler, m.Data)
	}
	if m.IsVoid() || w.ctx.Err() != nil {
		return // closing: the engine answers invocation_stopped for us
	}
	out := &Message{Type: TypeInvocationResult, InvocationID: m.InvocationID, FunctionID: m.FunctionID}
	if err != nil {
		out.Error = AsError(err)
	} else if raw, merr := marshalResult(res); merr != nil {
		out.Error = NewError(errcode.InvocationFailed, "result is not JSON: %v", merr)
	} else {
		out.Result = raw
	}
	if werr := w.write(c, out); werr != nil {
		w.cfg.Logger.Debug("replying", "err", werr)
	}
}

func invokeHandler(ctx context.Context, h Handler, data json.RawMessage) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = NewError(errcode.InvocationFailed, "handler panicked: %v", r)
		}
	}()
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return h(ctx, data)
}

// AsError turns any error into a wire error: an *Error as is, others as invocation_failed.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return NewError(errcode.InvocationFailed, "%s", err.Error())
}

func marshalResult(v any) (json.RawMessage, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if !wire.Valid(r) {
			return nil, errors.New("handler returned invalid raw JSON")
		}
		return r, nil
	}
	return json.Marshal(v)
}

func (w *Worker) write(c *link, m *Message) error {
	return c.send(m)
}

// link is one connection to the engine. Its frames go through a queue that one writer
// goroutine drains (batchconn.Queue), writing every frame queued at once with one socket write:
// under load a wake-up of the engine carries many frames.
type link struct {
	ws *batchconn.Conn
	q  *batchconn.Queue
}

var errLinkClosed = errors.New("connection to the engine closed")

func newLink(ws *batchconn.Conn) *link {
	l := &link{ws: ws, q: batchconn.NewQueue(ws, true, 0, 0)} // a client masks its frames
	go func() {
		if l.q.Run() != nil {
			l.close()
		}
	}()
	return l
}

// drain waits until the frames queued so far are written (or the link failed), at most d.
func (l *link) drain(d time.Duration) {
	done := make(chan struct{})
	go func() {
		l.q.Drain()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		l.close() // wakes the waiter: the queue is stopped
	}
}

// send queues m for the writer. A write failure is reported to the senders that come after it;
// the ones before learn of it as a lost connection.
func (l *link) send(m *Message) error {
	err := l.q.Push(wire.AppendEncode(l.q.Buf(), m))
	if err == nil {
		return nil // before errors.As, whose target would be allocated on every send
	}
	var werr *batchconn.WriteError
	if errors.As(err, &werr) {
		return errLinkClosed
	}
	return err
}

// close stops the writer and closes the socket.
func (l *link) close() {
	l.q.Stop(errLinkClosed)
	_ = l.ws.Close()
}

// dialLink dials the engine.
func dialLink(ctx context.Context, url string, header http.Header) (*link, error) {
	ws, err := batchconn.Dial(ctx, url, header)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(MaxFrameBytes)
	return newLink(ws), nil
}

// CallOption changes one call.
type CallOption func(*callOpts)

type callOpts struct {
	ns      *string
	timeout time.Duration
	meta    json.RawMessage
	action  *Action
}

// Enqueue asks the engine to hand the call to the queue worker for queue instead of running it
// now: the reply is {messageReceiptId} once the message is stored (action enqueue).
func Enqueue(queue string) CallOption {
	return func(o *callOpts) { o.action = &Action{Type: "enqueue", Queue: queue} }
}

// WithMetadata sends meta (a JSON object) as the invocation's metadata sidecar; trigger
// providers pass the trigger's metadata this way.
func WithMetadata(meta json.RawMessage) CallOption { return func(o *callOpts) { o.meta = meta } }

// InNamespace sends the call to ns instead of the default choice.
func InNamespace(ns string) CallOption { return func(o *callOpts) { o.ns = &ns } }

// WithTimeout bounds the call (default: the context deadline, else DefaultCallTimeout).
func WithTimeout(d time.Duration) CallOption { return func(o *callOpts) { o.timeout = d } }

// IsEngineFunction reports whether id belongs to the engine (engine::*, configuration::*,
// sandbox::*); such calls go to the default namespace.
func IsEngineFunction(id string) bool {
	return strings.HasPrefix(id, "engine::") || strings.HasPrefix(id, "configuration::") || strings.HasPrefix(id, "sandbox::")
}

func (w *Worker) resolve(fn string, opts []CallOption) callOpts {
	var o callOpts
	if len(opts) > 0 {
		o = applyCallOptions(opts)
	}
	if o.ns == nil && !IsEngineFunction(fn) && w.cfg.Namespace != DefaultNamespace {
		ns := w.cfg.Namespace
		o.ns = &ns
	}
	return o
}

// applyCallOptions is apart from resolve so that a call without options does not allocate its
// callOpts (the options take its address).
func applyCallOptions(opts []CallOption) callOpts {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Call invokes fn with payload (any JSON-marshalable value; json.RawMessage as is) and returns
// the raw result. Function errors are *Error.
func (w *Worker) Call(ctx context.Context, fn string, payload any, opts ...CallOption) (json.RawMessage, error) {
	o := w.resolve(fn, opts)
	timeout := o.timeout
	if timeout == 0 {
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		} else {
			timeout = DefaultCallTimeout
		}
	}
	c := w.liveConn()
	if c == nil {
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		if c, err = w.waitUp(wctx); err != nil {
			return nil, err
		}
	}
	return w.callOn(ctx, c, fn, payload, o, timeout)
}

// CallVoid invokes fn without waiting for any reply.
func (w *Worker) CallVoid(ctx context.Context, fn string, payload any, opts ...CallOption) error {
	o := w.resolve(fn, opts)
	data, err := marshalPayload(payload)
	if err != nil {
		return err
	}
	c, err := w.waitUp(ctx)
	if err != nil {
		return err
	}
	return w.write(c, &Message{Type: TypeInvokeFunction, FunctionID: fn, Data: data, Namespace: o.ns, Metadata: o.meta, Action: &Action{Type: "void"}})
}

func marshalPayload(p any) (json.RawMessage, error) {
	if p == nil {
		return json.RawMessage("{}"), nil
	}
	if r, ok := p.(json.RawMessage); ok {
		if !wire.Valid(r) {
			return nil, errors.New("payload is not valid JSON")
		}
		return r, nil
	}
	return json.Marshal(p)
}

func (w *Worker) waitUp(ctx context.Context) (*link, error) {
	for {
		w.mu.Lock()
		up, c, stopped := w.up, w.conn, w.err
		w.mu.Unlock()
		select {
		case <-w.done:
			if stopped == nil {
				stopped = errors.New("worker closed")
			}
			return nil, NewError(errcode.NotConnected, "not connected to the engine: %v", stopped)
		default:
		}
		select {
		case <-up:
			if c != nil {
				return c, nil
			}
		case <-ctx.Done():
			return nil, NewError(errcode.NotConnected, "not connected to the engine at %s", w.cfg.URL)
		case <-w.done:
		}
	}
}

func (w *Worker) callOn(ctx context.Context, c *link, fn string, payload any, o callOpts, timeout time.Duration) (json.RawMessage, error) {
	data, err := marshalPayload(payload)
	if err != nil {
		return nil, err
	}
	id := uuid.NewString() // iii's engine decodes invocation ids as UUIDs
	pc := w.pending.add(id, timeout+time.Second, ctx.Done())
	m := &Message{Type: TypeInvokeFunction, InvocationID: id, FunctionID: fn, Data: data, Namespace: o.ns, Metadata: o.meta, Action: o.action, TimeoutMS: timeout.Milliseconds()}
	if err := w.write(c, m); err != nil {
		w.pending.take(id)
		return nil, NewError(errcode.NotConnected, "sending to the engine: %v", err)
	}
	// The reply, a lost connection, the deadline and the end of ctx all arrive here: the last
	// two from the sweeper.
	r := <-pc.ch
	w.pending.release(pc)
	switch r {
	case nil:
		return nil, NewError(errcode.NotConnected, "connection to the engine was lost before %s replied", fn)
	case callExpired:
		return nil, timedOut(timeout)
	}
	res, rerr := r.Result, r.Error
	wire.Recycle(r)
	if rerr != nil {
		return nil, rerr
	}
	if len(res) == 0 {
		return json.RawMessage("null"), nil
	}
	return res, nil
}

func timedOut(timeout time.Duration) *Error {
	return NewError(errcode.ClientTimeout, "invocation timed out after %dms", timeout.Milliseconds())
}

func (w *Worker) stop(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return
	default:
	}
	w.err = err
	close(w.done)
}

// Close disconnects and stops reconnecting. In-flight handlers see their context cancelled.
func (w *Worker) Close() error {
	w.stop(nil)
	w.mu.Lock()
	c := w.conn
	w.mu.Unlock()
	if c != nil {
		c.drain(time.Second) // frames sent before Close still leave
	}
	w.cancel()
	if c != nil {
		return c.ws.CloseStatus(batchconn.StatusNormalClosure, "worker closing", time.Second)
	}
	return nil
}
