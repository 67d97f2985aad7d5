// Package rbacproxy is the rbac-proxy worker (iii's worker of that name): an RBAC gate in front
// of an engine. It listens on its own WebSocket port, speaks the iii worker protocol and, for
// every inbound connection, opens one connection to the engine's trusted listener and forwards
// the frames both ways. At that boundary it applies the engine's own gate (package engine/rbac),
// so a connection through the proxy is gated as one through an engine RBAC listener:
//
//   - the auth function (rbac.auth_function_id), called through the proxy's worker connection
//     with {headers, query_params, ip_address} within handshake_timeout_ms, opens the session;
//     fail closed, a refusal is iii's AUTH_ERROR error frame, then close 1008;
//   - invokefunction frames are allowed in iii's order (forbidden > allowed > infrastructure >
//     expose_functions > deny) and answered FORBIDDEN otherwise; allowed ones outside engine::
//     go to middleware_function_id when set. Metadata filters see the function's registered
//     metadata, read through the proxy's worker connection (engine::functions::info) and cached
//     until engine::functions-available fires (Watch); metadata that cannot be read exposes
//     nothing (fail closed);
//   - registrations pass the session's rights and the registration hooks, and carry its
//     function_registration_prefix (calls the engine sends back lose it again);
//   - engine::workers::register into a namespace the session is not scoped to is refused;
//   - the results of engine::functions::list list only what the session may call.
//
// Channel streams (/ws/channels/<id>) are forwarded unchanged to the engine's, which admits them
// by their access key.
package rbacproxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/wconfig"
)

// Where names the proxy in FORBIDDEN messages, as "listener <name>" names an engine listener.
const Where = "rbac-proxy"

// Caller makes calls through the proxy's own worker connection (a *protocol.Worker).
type Caller interface {
	Call(ctx context.Context, fn string, payload any, opts ...protocol.CallOption) (json.RawMessage, error)
}

// Proxy serves inbound worker connections.
type Proxy struct {
	cfg     Config
	calls   Caller
	log     *slog.Logger
	version string
	active  atomic.Int64
	meta    *metaCache
	metaNS  map[string]bool // namespaces where a metadata filter applies

	mu      sync.Mutex
	srv     *http.Server
	ln      net.Listener
	wg      sync.WaitGroup // connections being served
	conns   map[uint64]context.CancelFunc
	next    uint64
	closing bool
}

// New returns a proxy for cfg (checked) that calls the auth function, the hooks and the
// middleware through calls.
func New(cfg Config, calls Caller, version string, log *slog.Logger) *Proxy {
	return &Proxy{cfg: cfg, calls: calls, log: log, version: version, meta: newMetaCache(), metaNS: metaNamespaces(cfg.RBAC.Config)}
}

// Listen binds host:port and serves connections until Close.
func (p *Proxy) Listen() error {
	ln, err := net.Listen("tcp", net.JoinHostPort(p.cfg.Host, strconv.Itoa(p.cfg.Port)))
	if err != nil {
		return errcode.New(errcode.StartFailed, "rbac-proxy: listening on %s:%d: %w", p.cfg.Host, p.cfg.Port, err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: p.handshake()}
	p.mu.Lock()
	p.srv, p.ln = srv, ln
	p.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	p.log.Info("rbac-proxy listening", "addr", ln.Addr().String(), "engine_url", wconfig.RedactURL(p.cfg.EngineURL), "auth", p.cfg.authID())
	return nil
}

// Addr is the bound address (after Listen).
func (p *Proxy) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Close stops listening and ends every proxied connection, waiting for their goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	if srv != nil {
		_ = srv.Close() // hijacked WebSockets are closed by their own contexts below
	}
	p.shutdown()
	p.wg.Wait()
}

// shutdown ends the connections in flight (set by serve).
func (p *Proxy) shutdown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closing = true
	for _, cancel := range p.conns {
		cancel()
	}
}

func (p *Proxy) handshake() time.Duration {
	return time.Duration(p.cfg.HandshakeTimeoutMS) * time.Millisecond
}

// Status is rbac-proxy::status's answer.
type Status struct {
	Host              string `json:"host"`
	Port              int    `json:"port"`
	EngineURL         string `json:"engine_url"`
	RBACEnabled       bool   `json:"rbac_enabled"`
	ActiveConnections int64  `json:"active_connections"`
	Version           string `json:"version"`
}

// Status reports the proxy's bound address, its engine (credentials redacted), whether an auth
// function gates it and how many connections it serves.
func (p *Proxy) Status() Status {
	port := p.cfg.Port
	if a, ok := p.Addr().(*net.TCPAddr); ok {
		port = a.Port
	}
	return Status{Host: p.cfg.Host, Port: port, EngineURL: wconfig.RedactURL(p.cfg.EngineURL), RBACEnabled: p.cfg.authID() != "",
		ActiveConnections: p.active.Load(), Version: p.version}
}

// ServeHTTP upgrades one inbound worker connection, authenticates it and proxies it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, ok := p.track(cancel)
	if !ok {
		http.Error(w, "rbac-proxy is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer p.untrack(id)
	if strings.HasPrefix(r.URL.Path, protocol.ChannelPathPrefix) {
		p.serveChannel(ctx, cancel, w, r)
		return
	}
	in, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	in.SetReadLimit(protocol.MaxFrameBytes)
	p.active.Add(1)
	defer p.active.Add(-1)

	s, perr := p.authenticate(ctx, r)
	if perr != nil {
		p.log.Warn("connection refused by the proxy's auth", "code", perr.Code, "ip", rbac.PeerIP(r), "reason", perr.Message)
		p.refuse(in, perr, websocket.StatusPolicyViolation)
		return
	}
	dctx, dcancel := context.WithTimeout(ctx, p.handshake())
	hdr := http.Header{}
	if a := r.Header.Get("Authorization"); a != "" {
		hdr.Set("Authorization", a) // the engine checks project tokens itself
	}
	out, _, err := websocket.Dial(dctx, p.cfg.EngineURL, &websocket.DialOptions{HTTPHeader: hdr})
	dcancel()
	if err != nil {
		p.log.Warn("engine unreachable", "engine_url", wconfig.RedactURL(p.cfg.EngineURL), "err", err)
		p.refuse(in, protocol.NewError(errcode.EngineUnreachable, "rbac-proxy could not reach the engine: %v", err), websocket.StatusInternalError)
		return
	}
	out.SetReadLimit(protocol.MaxFrameBytes)
	c := &session{p: p, s: s, in: in, out: out, ctx: ctx, cancel: cancel, ns: protocol.DefaultNamespace, discovery: map[string]bool{}, closed: -1,
		lookups: make(chan struct{}, maxLookups), own: map[string]bool{}, barriers: map[string]chan *protocol.Message{},
		registeredCh: make(chan struct{})}
	c.run()
}

// serveChannel forwards a channel stream (/ws/channels/<id>?key=...) to the engine's, frame by
// frame and unchanged: the engine admits it by its access key, as on an RBAC listener. The
// engine's refusal (no such channel, wrong key, end taken) is answered with its HTTP status.
func (p *Proxy) serveChannel(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, r *http.Request) {
	u, err := url.Parse(p.cfg.EngineURL)
	if err != nil {
		http.Error(w, "rbac-proxy: engine_url is not a URL", http.StatusBadGateway)
		return
	}
	u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	dctx, dcancel := context.WithTimeout(ctx, p.handshake())
	out, resp, err := websocket.Dial(dctx, u.String(), nil)
	dcancel()
	if err != nil {
		status := http.StatusBadGateway
		if resp != nil && resp.StatusCode >= 400 {
			status = resp.StatusCode
		}
		http.Error(w, "rbac-proxy: the engine refused the channel stream", status)
		return
	}
	in, err := websocket.Accept(w, r, nil)
	if err != nil {
		_ = out.CloseNow()
		return
	}
	in.SetReadLimit(protocol.MaxFrameBytes)
	out.SetReadLimit(protocol.MaxFrameBytes)
	c := &session{p: p, in: in, out: out, ctx: ctx, cancel: cancel, raw: true, closed: -1}
	c.run()
}

// track records a connection's cancel for Close and counts it in the wait group; false once the
// proxy is closing.
func (p *Proxy) track(cancel context.CancelFunc) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return 0, false
	}
	if p.conns == nil {
		p.conns = map[uint64]context.CancelFunc{}
	}
	p.next++
	p.conns[p.next] = cancel
	p.wg.Add(1)
	return p.next, true
}

func (p *Proxy) untrack(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, id)
	p.wg.Done()
}

// authenticate opens the session of an upgrade request as an engine RBAC listener does: Open
// rights without an auth function, else its answer within the handshake deadline. Fail closed.
func (p *Proxy) authenticate(ctx context.Context, r *http.Request) (*rbac.Session, *protocol.Error) {
	id := p.cfg.authID()
	if id == "" {
		s := rbac.Open()
		s.IP = rbac.PeerIP(r)
		return s, nil
	}
	res, err := p.call(ctx, id, rbac.NewAuthInput(r), p.handshake())
	if err != nil {
		return nil, protocol.NewError(errcode.AuthError, "auth function %s refused the connection: %s: %s", id, err.Code, err.Message)
	}
	s, perr := rbac.ParseAuthResult(res)
	if perr != nil {
		return nil, protocol.NewError(errcode.AuthError, "%v", perr)
	}
	s.IP = rbac.PeerIP(r)
	return s, nil
}

// gateFunctions are the ids the proxy calls to enforce its gate: the auth function, the
// registration hooks and the middleware. Its sessions may not register them.
func (p *Proxy) gateFunctions() []string {
	ids := p.cfg.RBAC.GateFunctions()
	if p.cfg.MiddlewareFunctionID != "" {
		ids = append(ids, p.cfg.MiddlewareFunctionID)
	}
	return ids
}

// call calls fn through the proxy's worker connection within d, its error as a protocol error.
func (p *Proxy) call(ctx context.Context, fn string, payload any, d time.Duration) (json.RawMessage, *protocol.Error) {
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	res, err := p.calls.Call(cctx, fn, payload, protocol.WithTimeout(d))
	if err == nil {
		return res, nil
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return nil, pe
	}
	if cctx.Err() != nil {
		return nil, protocol.NewError(errcode.ClientTimeout, "%s did not answer within %v", fn, d)
	}
	return nil, protocol.NewError(errcode.NotConnected, "%v", err)
}

// refuse sends a refused connection iii's error frame and closes it with status.
func (p *Proxy) refuse(ws *websocket.Conn, perr *protocol.Error, status websocket.StatusCode) {
	frame, _ := json.Marshal(map[string]any{"type": "error", "error": perr})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = ws.Write(ctx, websocket.MessageText, frame)
	cancel()
	_ = ws.Close(status, perr.Code)
}
