// Package httpworker is the http worker: the "http" trigger type, config {api_path,
// http_method, condition_function_id?, middleware_function_ids?}, served on one listener, as
// iii's http worker of the 0.26 era (0.23.x) serves its trigger-era routes. A description is
// kept in the config; any other key refuses the trigger with TRIGGER_CONFIG_UNSUPPORTED rather
// than being ignored (package triggerkeys).
//
// A path template is a slash-separated path whose segments are literal or parameters (":id" or
// "{id}"). A request is matched on its path, then its method:
//
//   - no route has the path: 404; routes of other methods only: 405 with Allow;
//   - a path parameter holding a NUL byte (%00): 400 INVALID_PATH_PARAMETER; every other value,
//     "." and ".." included, reaches the function as it is (matching never resolves dot
//     segments), so a function that uses a parameter as a file name must check it;
//   - the global middleware of the config (by priority) runs first, before the body is read (as
//     in iii, so it can refuse a request without taking its body); then the body is read, then
//     the route's condition and the route's middleware_function_ids (in order) run before the
//     route's function: each
//     middleware gets {phase: "preHandler", request: {method, path, path_params, query_params,
//     headers}, context} and answers {action: "continue", context?} (its context is merged into
//     the request's) or {action: "respond", response} (the response; nothing after it runs). A
//     condition's false (or null) answer is 422 CONDITION_NOT_MET;
//   - then the bound function gets {method, path, path_params, query_params, headers, body,
//     context, trigger: {type, method, path}} (body: the JSON value for a JSON request, else the
//     text) and its {status_code, headers, body} is the response (body: a string as is, any
//     other value as JSON). A function error is 500; no answer within default_timeout is 504.
//   - with stream channels (SetChannels), the function also gets request_body and response,
//     iii's streamed bodies (see serveStreamed and stream).
//
// Errors the worker answers itself have iii's envelope {error: {code, message, error_id?}}; a
// 5xx one carries an error_id (a UUID) that is logged with its cause.
//
// Limits: request headers must arrive within read_header_timeout and the body within
// body_read_timeout (else 408); bodies over max_body_bytes get 413. A request takes one of the
// concurrency_request_limit slots only once its body is read (more at once get 503), so clients
// that upload slowly hold connections, never slots; and one client address may hold at most
// per_client_request_limit slots at once (more get 429), so it cannot take every slot.
// CORS: a request whose Origin is in cors.allowed_origins ("*" for any) gets
// Access-Control-Allow-Origin; OPTIONS preflights are answered by the worker.
package httpworker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/triggerkeys"
)

// Error codes of the http worker: of a refused trigger, and of request errors.
const (
	// CodeRouteConflict refuses a trigger whose method and path shape another trigger already serves.
	CodeRouteConflict = "HTTP_ROUTE_CONFLICT"
	// CodeTriggerConfigUnsupported refuses a trigger whose config has a key the worker does not
	// implement (any key but its own and description), instead of ignoring it.
	CodeTriggerConfigUnsupported = triggerkeys.Code
	// CodeInvalidPathParameter answers 400 to a request whose path parameter holds a NUL byte.
	CodeInvalidPathParameter = "INVALID_PATH_PARAMETER"
	// CodeBodyTimeout answers 408 to a request whose body did not arrive within body_read_timeout.
	CodeBodyTimeout = "BODY_TIMEOUT"
	// CodeClientLimit answers 429 to a client already at per_client_request_limit requests.
	CodeClientLimit = "CLIENT_REQUEST_LIMIT"
)

// Config is the http worker's configuration.
type Config struct {
	Host                    string `yaml:"host" json:"host"`
	Port                    int    `yaml:"port" json:"port"`
	DefaultTimeoutMS        int    `yaml:"default_timeout" json:"default_timeout"`
	MaxBodyBytes            int64  `yaml:"max_body_bytes" json:"max_body_bytes"`
	ConcurrencyRequestLimit int    `yaml:"concurrency_request_limit" json:"concurrency_request_limit"`
	// PerClientRequestLimit bounds the slots one client address holds at once (requests whose
	// body is read); 0 means a quarter of ConcurrencyRequestLimit.
	PerClientRequestLimit int `yaml:"per_client_request_limit" json:"per_client_request_limit"`
	// ReadHeaderTimeoutMS bounds the time to read a request's headers.
	ReadHeaderTimeoutMS int `yaml:"read_header_timeout" json:"read_header_timeout"`
	// BodyReadTimeoutMS bounds the time to read a request's body, from the end of its headers.
	BodyReadTimeoutMS int `yaml:"body_read_timeout" json:"body_read_timeout"`
	// IdleTimeoutMS is how long a keep-alive connection may wait for its next request.
	IdleTimeoutMS int  `yaml:"idle_timeout" json:"idle_timeout"`
	CORS          CORS `yaml:"cors" json:"cors"`
	// Middleware runs on every route, before the route's condition and its own middleware.
	Middleware []Middleware `yaml:"middleware" json:"middleware"`
}

// CORS says which browser origins may call the routes.
type CORS struct {
	AllowedOrigins []string `yaml:"allowed_origins" json:"allowed_origins"`
	AllowedMethods []string `yaml:"allowed_methods" json:"allowed_methods"`
}

// Defaults are the configuration of a worker configured with nothing.
func Defaults() Config {
	return Config{Host: "127.0.0.1", Port: 3111, DefaultTimeoutMS: 30000, MaxBodyBytes: 1 << 20, ConcurrencyRequestLimit: 1024,
		ReadHeaderTimeoutMS: 10000, BodyReadTimeoutMS: 30000, IdleTimeoutMS: 120000,
		CORS: CORS{AllowedMethods: []string{"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}}}
}

// Validate refuses limits and timeouts that are not positive and middleware without a function
// or of another phase than preHandler, naming the key.
func (c Config) Validate() error {
	for _, k := range []struct {
		key string
		v   int64
	}{{"default_timeout", int64(c.DefaultTimeoutMS)}, {"max_body_bytes", c.MaxBodyBytes},
		{"concurrency_request_limit", int64(c.ConcurrencyRequestLimit)}, {"read_header_timeout", int64(c.ReadHeaderTimeoutMS)},
		{"body_read_timeout", int64(c.BodyReadTimeoutMS)}, {"idle_timeout", int64(c.IdleTimeoutMS)}} {
		if k.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", k.key, k.v)
		}
	}
	if c.PerClientRequestLimit < 0 {
		return fmt.Errorf("per_client_request_limit must be positive (or 0 for a quarter of concurrency_request_limit), got %d", c.PerClientRequestLimit)
	}
	return validateMiddleware(c.Middleware)
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// HTTPServer is the listener's server for handler h: the header and idle timeouts of cfg (the
// body timeout is the handler's, see Server.ServeHTTP).
func HTTPServer(cfg Config, h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ms(cfg.ReadHeaderTimeoutMS), IdleTimeout: ms(cfg.IdleTimeoutMS)}
}

// Caller runs a function through the engine.
type Caller func(ctx context.Context, t protocol.Trigger, fn string, payload any, timeout time.Duration) (json.RawMessage, error)

type route struct {
	t          protocol.Trigger
	method     string
	template   string
	segs       []string
	condition  string
	middleware []string
}

// Server serves the registered routes.
type Server struct {
	cfg    Config
	call   Caller
	log    *slog.Logger
	sem    chan struct{}
	global []string // function ids of the global middleware, in the order they run

	clientMu  sync.Mutex
	clients   map[string]int // slots held by client address
	perClient int

	chans atomic.Pointer[Channels] // the request_body and response channels (SetChannels); nil: none
	wg    sync.WaitGroup           // goroutines of streamed requests

	mu     sync.RWMutex
	routes map[string]*route // by trigger id
}

// New returns a server with no routes.
func New(cfg Config, call Caller, log *slog.Logger) *Server {
	limit := max(cfg.ConcurrencyRequestLimit, 1)
	perClient := cfg.PerClientRequestLimit
	if perClient <= 0 {
		perClient = max(limit/4, 1)
	}
	return &Server{cfg: cfg, call: call, log: log, sem: make(chan struct{}, limit), global: globalChain(cfg.Middleware),
		clients: map[string]int{}, perClient: perClient, routes: map[string]*route{}}
}

// enter counts a request of client; false when the client is at its limit.
func (s *Server) enter(client string) bool {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	if s.clients[client] >= s.perClient {
		return false
	}
	s.clients[client]++
	return true
}

func (s *Server) leave(client string) {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	if s.clients[client]--; s.clients[client] <= 0 {
		delete(s.clients, client)
	}
}

// clientOf is the address a request came from (without its port).
func clientOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

func param(seg string) (string, bool) {
	if strings.HasPrefix(seg, ":") && len(seg) > 1 {
		return seg[1:], true
	}
	if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") && len(seg) > 2 {
		return seg[1 : len(seg)-1], true
	}
	return "", false
}

// shape is the template with parameter names blanked: two routes of one shape conflict.
func shape(segs []string) string {
	out := make([]string, len(segs))
	for i, s := range segs {
		if _, ok := param(s); ok {
			out[i] = ":"
		} else {
			out[i] = s
		}
	}
	return "/" + strings.Join(out, "/")
}

// configKeys are the keys of an http trigger's config the worker implements (description is
// kept as well, see package triggerkeys).
var configKeys = []string{"api_path", "http_method", "condition_function_id", "middleware_function_ids"}

// RegisterTrigger adds a route: config {api_path, http_method, condition_function_id?,
// middleware_function_ids?, description?}; any other key refuses the trigger
// (TRIGGER_CONFIG_UNSUPPORTED).
func (s *Server) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	if err := triggerkeys.Check("http", t.Config, configKeys...); err != nil {
		return err
	}
	var cfg struct {
		APIPath     string   `json:"api_path"`
		HTTPMethod  string   `json:"http_method"`
		ConditionFn string   `json:"condition_function_id"`
		Middleware  []string `json:"middleware_function_ids"`
	}
	if err := json.Unmarshal(t.Config, &cfg); err != nil || cfg.APIPath == "" {
		return protocol.NewError(errcode.InvalidArguments, "http trigger config must be {api_path, http_method?, condition_function_id?, middleware_function_ids?: [function id, ...]}")
	}
	for i, id := range cfg.Middleware {
		if id == "" {
			return protocol.NewError(errcode.InvalidArguments, "http trigger config: middleware_function_ids[%d] is empty: it must name a function", i)
		}
	}
	method := strings.ToUpper(cfg.HTTPMethod)
	if method == "" {
		method = http.MethodGet
	}
	segs := splitPath(cfg.APIPath)
	r := &route{t: t, method: method, template: "/" + strings.Join(segs, "/"), segs: segs, condition: cfg.ConditionFn, middleware: cfg.Middleware}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, o := range s.routes {
		if id != t.ID && o.method == method && shape(o.segs) == shape(segs) {
			return protocol.NewError(CodeRouteConflict, "%s %s is already served (by %s through %s)", method, r.template, o.t.FunctionID, o.template)
		}
	}
	s.routes[t.ID] = r
	return nil
}

// UnregisterTrigger removes a route.
func (s *Server) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.routes, t.ID)
	return nil
}

// match finds the route of path and method: literal segments beat parameters.
func (s *Server) match(method string, segs []string) (r *route, params map[string]string, allow []string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	best := -1
	methods := map[string]bool{}
	for _, c := range s.routes {
		if len(c.segs) != len(segs) {
			continue
		}
		score, ok := 0, true
		for i, seg := range c.segs {
			if _, isParam := param(seg); isParam {
				continue
			}
			if seg != segs[i] {
				ok = false
				break
			}
			score++
		}
		if !ok {
			continue
		}
		methods[c.method] = true
		if c.method == method && score > best {
			best, r = score, c
		}
	}
	if r == nil {
		for m := range methods {
			allow = append(allow, m)
		}
		sort.Strings(allow)
		return nil, nil, allow
	}
	params = map[string]string{}
	for i, seg := range r.segs {
		if name, ok := param(seg); ok {
			params[name] = segs[i]
		}
	}
	return r, params, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) cors(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	for _, o := range s.cfg.CORS.AllowedOrigins {
		if o == "*" || o == origin {
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Add("Vary", "Origin")
			return
		}
	}
}

// ServeHTTP routes one request to its function. Only once its body is read (within
// body_read_timeout and max_body_bytes) does the request count against its client's
// per_client_request_limit and take a slot of concurrency_request_limit.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.cors(w, r)
	if s.preflight(w, r) {
		return
	}
	rt, params, ok := s.findRoute(w, r)
	if !ok {
		return
	}
	timeout := ms(s.cfg.DefaultTimeoutMS)
	mwctx := map[string]any{}
	if !s.runGlobal(w, r, rt, params, mwctx, timeout) {
		return
	}
	body, first, rest, ok := s.readBody(w, r)
	if !ok {
		return
	}
	release, ok := s.admit(w, r)
	if !ok {
		if rest != nil {
			w.Header().Set("Connection", "close")
		}
		return
	}
	defer release()
	req := request(r, rt, params, body)
	req["context"] = mwctx
	if !s.checkCondition(w, r, rt, req, rest, timeout) {
		return
	}
	for _, fn := range rt.middleware {
		if rest != nil {
			w.Header().Set("Connection", "close") // in case it answers: the body is not read
		}
		if !s.runMiddleware(w, r, rt, fn, req, mwctx, timeout) {
			return
		}
		w.Header().Del("Connection")
	}
	if s.channels() != nil {
		s.serveStreamed(w, r, rt, req, first, rest, timeout)
		return
	}
	out, err := s.call(r.Context(), rt.t, rt.t.FunctionID, req, timeout)
	if err != nil {
		s.failCall(w, r, "handler", rt.t.FunctionID, err)
		return
	}
	s.respond(w, out)
}

// preflight answers a CORS preflight request (OPTIONS with Access-Control-Request-Method)
// with the allowed methods and the requested headers, and reports whether r was one.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	w.Header().Set("Access-Control-Allow-Methods", strings.Join(s.cfg.CORS.AllowedMethods, ", "))
	if h := r.Header.Get("Access-Control-Request-Headers"); h != "" {
		w.Header().Set("Access-Control-Allow-Headers", h)
	}
	w.WriteHeader(http.StatusNoContent)
	return true
}

// findRoute finds the route serving r and its path parameters. When none serves r, or a
// parameter holds a NUL byte, it answers 405, 404 or 400 and reports false.
func (s *Server) findRoute(w http.ResponseWriter, r *http.Request) (*route, map[string]string, bool) {
	segs := splitPath(r.URL.Path)
	rt, params, allow := s.match(r.Method, segs)
	if rt == nil {
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.answerError(w, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", r.Method+" is not served on "+r.URL.Path)
			return nil, nil, false
		}
		s.answerError(w, r, http.StatusNotFound, CodeNotFound, "no route serves "+r.URL.Path)
		return nil, nil, false
	}
	for name, v := range params {
		if strings.IndexByte(v, 0) >= 0 {
			s.answerError(w, r, http.StatusBadRequest, CodeInvalidPathParameter, fmt.Sprintf("path parameter %q holds a NUL byte", name))
			return nil, nil, false
		}
	}
	return rt, params, true
}

// runGlobal runs the global middleware, before the body is read, filling mwctx. It reports
// false when the request was answered: refused by a middleware or at a limit.
func (s *Server) runGlobal(w http.ResponseWriter, r *http.Request, rt *route, params map[string]string, mwctx map[string]any, timeout time.Duration) bool {
	if len(s.global) == 0 {
		return true
	}
	// As in iii, the global middleware runs before the body is read, so it can refuse a
	// request (auth, rate limits) without taking its body. It holds a slot while it runs.
	// An answer before the body is read closes the connection: net/http would otherwise
	// wait for the unread body to keep the connection alive.
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	release, ok := s.admit(w, r)
	if !ok {
		return false
	}
	req := request(r, rt, params, nil)
	for _, fn := range s.global {
		if !s.runMiddleware(w, r, rt, fn, req, mwctx, timeout) {
			release()
			return false
		}
	}
	release()
	w.Header().Del("Connection")
	return true
}

// checkCondition calls the route's condition function, if it has one, with req. When the
// call fails or the condition refuses the request it answers (a failure, or 422 with
// CONDITION_NOT_MET), closing a body still unread (rest), and reports false.
func (s *Server) checkCondition(w http.ResponseWriter, r *http.Request, rt *route, req map[string]any, rest io.Reader, timeout time.Duration) bool {
	if rt.condition == "" {
		return true
	}
	out, err := s.call(r.Context(), rt.t, rt.condition, req, timeout)
	if err != nil {
		s.closeUnread(w, rest)
		s.failCall(w, r, "condition", rt.condition, err)
		return false
	}
	if !truthy(out) {
		s.closeUnread(w, rest)
		writeJSON(w, http.StatusUnprocessableEntity, envelope{Skipped: true,
			Error: envelopeError{Code: CodeConditionNotMet, Message: "the route's condition " + rt.condition + " refused the request"}})
		return false
	}
	return true
}

// admit counts r against its client's per_client_request_limit and takes a slot of
// concurrency_request_limit; release gives both back. When either is at its limit it answers
// 429 or 503 and reports false.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	client := clientOf(r)
	if !s.enter(client) {
		s.answerError(w, r, http.StatusTooManyRequests, CodeClientLimit, fmt.Sprintf("this client (%s) already has %d requests running in the http worker (per_client_request_limit)", client, s.perClient))
		return nil, false
	}
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem; s.leave(client) }, true
	default:
		s.leave(client)
		s.answerError(w, r, http.StatusServiceUnavailable, "TOO_MANY_REQUESTS", "the http worker is serving its limit of concurrent requests (concurrency_request_limit)")
		return nil, false
	}
}

// readBody reads the body of r within max_body_bytes and body_read_timeout. body is the JSON
// value for a JSON request, else the text, nil when empty; first is the bytes read. With stream
// channels, a body that is not JSON and is over InlineBodyBytes is not read whole: body is nil,
// first its first bytes and rest the rest, which streams into request_body while the handler
// runs (the read deadline stays until it is read). On failure it writes the error response and
// returns false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body any, first []byte, rest io.Reader, ok bool) {
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(ms(s.cfg.BodyReadTimeoutMS))) == nil
	lim := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	isJSON := mt == "application/json" || strings.HasSuffix(mt, "+json")
	var raw []byte
	var err error
	if isJSON || s.channels() == nil {
		raw, err = io.ReadAll(lim)
	} else if raw, err = io.ReadAll(io.LimitReader(lim, InlineBodyBytes+1)); err == nil && len(raw) > InlineBodyBytes {
		return nil, raw, lim, true
	}
	if deadline {
		// No deadline while the function runs: the server reads on in the background to
		// notice a client that leaves, and a timeout there would cancel the request.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		be := s.classifyBodyError(err)
		if be.status != http.StatusRequestEntityTooLarge {
			w.Header().Set("Connection", "close")
		}
		s.answerError(w, r, be.status, be.code, be.msg)
		return nil, nil, nil, false
	}
	if len(raw) > 0 {
		if isJSON {
			if err := json.Unmarshal(raw, &body); err != nil {
				s.answerError(w, r, http.StatusBadRequest, "BAD_REQUEST", "the body is not valid JSON: "+err.Error())
				return nil, nil, nil, false
			}
		} else {
			body = string(raw)
		}
	}
	return body, raw, nil, true
}

// closeUnread marks the connection to close after the answer when the body (rest) is unread.
func (s *Server) closeUnread(w http.ResponseWriter, rest io.Reader) {
	if rest != nil {
		w.Header().Set("Connection", "close")
	}
}

// request is the function input for r on route rt: method, path, path_params, query_params,
// headers (lower-case names), body, context (what middleware adds; empty) and trigger.
func request(r *http.Request, rt *route, params map[string]string, body any) map[string]any {
	query := map[string]any{}
	for k, v := range r.URL.Query() {
		if len(v) == 1 {
			query[k] = v[0]
		} else {
			query[k] = v
		}
	}
	headers := map[string]string{}
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	return map[string]any{"method": r.Method, "path": r.URL.Path, "path_params": params, "query_params": query,
		"headers": headers, "body": body, "context": map[string]any{}, "trigger": map[string]string{"type": "http", "method": rt.method, "path": rt.template}}
}

func truthy(out json.RawMessage) bool {
	var v any
	if json.Unmarshal(out, &v) != nil {
		return false
	}
	switch x := v.(type) {
	case bool:
		return x
	case nil:
		return false
	case map[string]any:
		if b, ok := x["result"].(bool); ok {
			return b
		}
		return true
	}
	return true
}

func (s *Server) respond(w http.ResponseWriter, out json.RawMessage) {
	var res struct {
		StatusCode int               `json:"status_code"`
		Headers    map[string]string `json:"headers"`
		Body       json.RawMessage   `json:"body"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		res.Body = out // not an object: the value is the body
	}
	if res.StatusCode == 0 {
		res.StatusCode = http.StatusOK
	}
	for k, v := range res.Headers {
		w.Header().Set(k, v)
	}
	var text string
	switch {
	case len(res.Body) == 0 || string(res.Body) == "null":
		w.WriteHeader(res.StatusCode)
		return
	case json.Unmarshal(res.Body, &text) == nil:
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.WriteString(w, text)
	default:
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(res.Body)
	}
}
