package stream

import (
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/webguard"
)

// Codes of the stream port's refusals, this worker's own (iii's port refuses nothing).
const (
	// CodeConnectionLimit: the port already holds max_connections sockets, or the client's
	// address holds max_connections_per_address (HTTP 503 to the upgrade).
	CodeConnectionLimit = "STREAM_CONNECTION_LIMIT"
)

// Defaults of Limits.
const (
	DefaultJoinTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 5 * time.Minute
	DefaultMaxConnections    = 1024
	DefaultMaxPerAddress     = 256
	DefaultPingInterval      = 30 * time.Second
	authWarningEvery         = time.Minute
	pingTimeout              = 15 * time.Second
	connectionLimitRetryHint = "5"
)

// Limits bound the stream port. Browsers are the port's clients, so what a page may do is
// bounded: which pages may connect at all (AllowedOrigins, and the Host check of a loopback
// bind against DNS rebinding), how long a socket may stay without a subscription, and how many
// sockets one address and all of them may hold. A zero field is its default.
type Limits struct {
	// AllowedOrigins are the browser origins admitted besides a page of the port's own origin
	// and pages served from a loopback address (localhost, 127.0.0.0/8, [::1]): path.Match
	// patterns, case-insensitive; one with "://" matches scheme://host[:port], any other
	// host[:port], as the engine's allowed_origins. "*" admits every origin (iii's behaviour).
	// A request without an Origin header (an SDK, a script, not a browser) is always admitted.
	AllowedOrigins []string
	// JoinTimeout closes a socket that has not joined a stream this long after connecting.
	JoinTimeout time.Duration
	// IdleTimeout closes a socket left without a subscription (all of them left) this long.
	IdleTimeout time.Duration
	// MaxConnections and MaxPerAddress bound the sockets held (upgraded or being
	// authenticated) in all and from one client IP address.
	MaxConnections, MaxPerAddress int
	// PingInterval is how often a socket that has joined is pinged; one that does not answer
	// within 15 s (or PingInterval, when shorter) is closed (a peer gone without closing).
	PingInterval time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.JoinTimeout, DefaultJoinTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	def(&l.PingInterval, DefaultPingInterval)
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxPerAddress <= 0 {
		l.MaxPerAddress = DefaultMaxPerAddress
	}
	return l
}

// checkHandshake refuses, before anything else runs for it, an upgrade whose Host a DNS-rebound
// name could have sent (on a loopback bind) or whose browser origin is not admitted.
func (h *Hub) checkHandshake(r *http.Request) *errcode.Error {
	if h.Loopback && !webguard.RebindSafeHost(r.Host) {
		return errcode.New(errcode.HostForbidden,
			"the stream port listens on a loopback address and takes only loopback names or IP addresses in Host (localhost, 127.0.0.1, [::1]); got %q", r.Host)
	}
	origin := r.Header.Get("Origin")
	if origin == "" || originAllowed(origin, r.Host, h.Limits.AllowedOrigins) {
		return nil
	}
	return errcode.New(errcode.OriginForbidden,
		"stream WebSocket from origin %q refused: only pages of this port's origin or of a loopback address may read streams; "+
			"list the origin under allowed_origins of the stream worker (iii-stream) to allow it", origin)
}

// originAllowed reports whether a browser page of origin may connect to host: "*" among the
// patterns, same host, a page served from a loopback address, or a match of one of the patterns.
func originAllowed(origin, host string, patterns []string) bool {
	return slices.Contains(patterns, "*") || webguard.LoopbackOrigin(origin) || webguard.OriginAllowed(origin, host, patterns)
}

// slots counts the sockets held, in all and by client address.
type slots struct {
	mu     sync.Mutex
	total  int
	byAddr map[string]int
}

// take reserves a socket for addr within lim, or returns the refusal.
func (s *slots) take(addr string, lim Limits) *errcode.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byAddr == nil {
		s.byAddr = map[string]int{}
	}
	switch {
	case s.total >= lim.MaxConnections:
		return errcode.New(CodeConnectionLimit, "the stream port holds its %d sockets (max_connections); try again later", lim.MaxConnections)
	case s.byAddr[addr] >= lim.MaxPerAddress:
		return errcode.New(CodeConnectionLimit, "address %s holds %d stream sockets (max_connections_per_address); close some first", addr, lim.MaxPerAddress)
	}
	s.total++
	s.byAddr[addr]++
	return nil
}

func (s *slots) give(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.byAddr[addr]--; s.byAddr[addr] <= 0 {
		delete(s.byAddr, addr)
	}
}

// clientAddr is the IP address of r's peer.
func clientAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// refuse answers a refused upgrade with the coded message and logs it (rate-limited).
func (h *Hub) refuse(w http.ResponseWriter, r *http.Request, status int, e *errcode.Error) {
	h.warn(&h.refusedWarn, "stream WebSocket refused", "code", e.Code, "addr", r.RemoteAddr, "origin", r.Header.Get("Origin"), "host", r.Host)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", connectionLimitRetryHint)
	}
	http.Error(w, errcode.Line(e), status)
}

// warnLimiter lets one warning of a kind through per authWarningEvery and counts the others,
// so a client repeating what draws it cannot flood the log.
type warnLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// warn logs msg through h.Log unless one of its kind went out less than authWarningEvery ago;
// the line carries how many were held back since the last one.
func (h *Hub) warn(l *warnLimiter, msg string, args ...any) {
	if h.Log == nil {
		return
	}
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < authWarningEvery {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed_since_last", n)
	}
	h.Log(msg, args...)
}
