package core

import (
	"net"
	"net/http"

	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/webguard"
)

// checkHandshake admits an upgrade request to the worker listener (engine and channel endpoints
// alike). On a loopback listener the Host must be a loopback name or an IP address, so that a
// page on a domain rebound to 127.0.0.1 cannot reach the engine (DNS rebinding needs a name; an
// address is what a VM worker uses: qemu's user network forwards its 10.0.2.2 to loopback). A request with an
// Origin header (a browser page) must be same-origin or match the listener's AllowedOrigins; one without
// (SDKs, workers, iii call) is allowed.
func (e *Engine) checkHandshake(l *listener, r *http.Request) *errcode.Error {
	if l.loopback && !webguard.RebindSafeHost(r.Host) {
		return errcode.New(errcode.HostForbidden,
			"this engine listens on a loopback address and takes only loopback names or IP addresses in Host (localhost, 127.0.0.1, [::1]); got %q", r.Host)
	}
	origin := r.Header.Get("Origin")
	if origin == "" || webguard.OriginAllowed(origin, r.Host, l.AllowedOrigins) {
		return nil
	}
	return errcode.New(errcode.OriginForbidden,
		"WebSocket handshake from origin %q refused: browser pages of other origins may not drive the engine; "+
			"list the origin under allowed_origins of iii-worker-manager in config.yaml to allow it", origin)
}

// isLoopbackAddr reports whether a listener address is a loopback one (not a wildcard).
func isLoopbackAddr(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// refuse answers a refused handshake with 403 and the coded message, and logs it.
func (e *Engine) refuse(w http.ResponseWriter, r *http.Request, h *errcode.Error) {
	e.log.Warn("WebSocket handshake refused", "code", h.Code, "path", r.URL.Path, "origin", r.Header.Get("Origin"), "host", r.Host)
	http.Error(w, errcode.Line(h), http.StatusForbidden)
}
