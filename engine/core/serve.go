package core

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
)

// Handler is the HTTP handler of the main worker listener (Options' origins, no Host check):
// /ws/channels/{id} upgrades to one end of a stream channel, /otel takes SDK telemetry, every
// other path upgrades to a worker connection.
func (e *Engine) Handler() http.Handler {
	return e.handler(&listener{Listener: e.mainListener()})
}

func (e *Engine) handler(l *listener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := e.checkHandshake(l, r); h != nil {
			e.refuse(w, r, h)
			return
		}
		if id, ok := strings.CutPrefix(r.URL.Path, protocol.ChannelPathPrefix); ok {
			e.serveChannel(w, r, id, l)
			return
		}
		if r.URL.Path == "/otel" {
			ws, err := websocket.Accept(w, r, acceptOptions(l))
			if err != nil {
				return
			}
			ws.SetReadLimit(protocol.MaxFrameBytes)
			if l.gated() {
				if _, perr := e.authenticate(l, r); perr != nil {
					e.log.Warn("telemetry connection refused by the listener's auth", "listener", l.Name, "code", perr.Code, "reason", perr.Message)
					_ = ws.Close(websocket.StatusPolicyViolation, AuthError)
					return
				}
			}
			e.drainTelemetry(ws) // SDK telemetry: given to the observer, never listed as a worker
			return
		}
		ws, err := batchconn.Accept(w, r, e.opts.WriteTimeout)
		if err != nil {
			return
		}
		ws.SetReadLimit(protocol.MaxFrameBytes)
		ws.SetFrameTimeout(e.opts.FrameTimeout, e.opts.FrameMinRate)
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var session *rbac.Session
		if l.gated() {
			var perr *protocol.Error
			if session, perr = e.authenticate(l, r); perr != nil {
				e.refuseSession(l, r, ws, perr)
				return
			}
		}
		e.serveConn(ws, strings.TrimSpace(token), l, session)
	})
}

// acceptOptions lets coder/websocket (channels, /otel) check the origin too, with the same
// patterns as checkHandshake (which has already refused anything else with a coded message).
func acceptOptions(l *listener) *websocket.AcceptOptions {
	return &websocket.AcceptOptions{OriginPatterns: l.AllowedOrigins}
}

// drainTelemetry reads the frames of a telemetry-only /otel socket until the peer goes away,
// handing each "OTLP", "MTRC" or "LOGS" frame to the observer (dropped without one).
func (e *Engine) drainTelemetry(ws *websocket.Conn) {
	defer ws.CloseNow()
	for {
		_, b, err := ws.Read(context.Background())
		if err != nil {
			return
		}
		e.telemetry("", b)
	}
}

// telemetry hands an SDK telemetry frame (a 4-byte signal prefix, then OTLP/JSON) to the
// observer; it reports false for a frame that is not one.
func (e *Engine) telemetry(workerID string, b []byte) bool {
	if len(b) < 4 {
		return false
	}
	switch sig := string(b[:4]); sig {
	case "OTLP", "MTRC", "LOGS":
		if e.obs != nil {
			e.obs.Telemetry(workerID, sig, b[4:])
		}
		return true
	}
	return false
}

// Serve accepts workers on ln, the main listener (Options' origins and handshake deadline),
// until ctx ends, then closes every connection.
func (e *Engine) Serve(ctx context.Context, ln net.Listener) error {
	return e.ServeAll(ctx, []Bound{{Listener: e.mainListener(), Net: ln}})
}

// ServeAll accepts workers on every listener until ctx ends, then closes every connection. A
// listener that fails closes the others and its error is returned.
func (e *Engine) ServeAll(ctx context.Context, bound []Bound) error {
	go e.sweep(ctx, 20*time.Millisecond)
	e.reserveGateFunctions(bound)
	errc := make(chan error, len(bound))
	srvs := make([]*http.Server, 0, len(bound))
	for _, b := range bound {
		l := &listener{Listener: b.Listener, loopback: isLoopbackAddr(b.Net.Addr())}
		if l.HandshakeTimeout <= 0 {
			l.HandshakeTimeout = e.opts.HandshakeTimeout
		}
		srv := &http.Server{Handler: e.handler(l), ReadHeaderTimeout: l.HandshakeTimeout}
		srvs = append(srvs, srv)
		go func() { errc <- srv.Serve(batchconn.Listener{Listener: b.Net, WriteTimeout: e.opts.WriteTimeout}) }()
	}
	select {
	case err := <-errc:
		for _, b := range bound {
			_ = b.Net.Close()
		}
		return err
	case <-ctx.Done():
	}
	for _, b := range bound {
		_ = b.Net.Close()
	}
	e.chans.CloseAll(200 * time.Millisecond)
	e.mu.RLock()
	conns := make([]*conn, 0, len(e.conns))
	for _, c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.RUnlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() {
				_ = c.ws.CloseStatus(batchconn.StatusGoingAway, "engine shutting down", 200*time.Millisecond)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(200 * time.Millisecond):
				_ = c.ws.Close()
			}
		}()
	}
	wg.Wait()
	for _, srv := range srvs {
		_ = srv.Close()
	}
	if e.cluster != nil {
		e.cluster.Close()
	}
	return nil
}
