package rbacproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
)

// fakeCalls serves the proxy's calls through its worker connection from a map.
type fakeCalls struct {
	mu    sync.Mutex
	fns   map[string]func(ctx context.Context, in json.RawMessage) (json.RawMessage, error)
	calls []string
}

func (f *fakeCalls) Call(ctx context.Context, fn string, payload any, _ ...protocol.CallOption) (json.RawMessage, error) {
	in, _ := json.Marshal(payload)
	f.mu.Lock()
	f.calls = append(f.calls, fn+" "+string(in))
	h := f.fns[fn]
	f.mu.Unlock()
	if h == nil {
		return nil, protocol.NewError("function_not_found", "function %s not found", fn)
	}
	return h(ctx, in)
}

// fakeEngine is the trusted listener: it records the frames it gets and sends what a test asks.
type fakeEngine struct {
	srv    *httptest.Server
	frames chan string
	conns  chan *websocket.Conn
}

func newFakeEngine(t *testing.T) *fakeEngine {
	e := &fakeEngine{frames: make(chan string, 64), conns: make(chan *websocket.Conn, 4)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		e.conns <- ws
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			e.frames <- string(b)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *fakeEngine) url() string { return "ws" + strings.TrimPrefix(e.srv.URL, "http") }

func (e *fakeEngine) next(t *testing.T) string {
	t.Helper()
	select {
	case f := <-e.frames:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("the engine got no frame within 5s")
		return ""
	}
}

func (e *fakeEngine) conn(t *testing.T) *websocket.Conn {
	t.Helper()
	select {
	case c := <-e.conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy did not dial the engine within 5s")
		return nil
	}
}

func gateConfig(engineURL string) Config {
	c := Default()
	c.Port = 0
	c.EngineURL = engineURL
	c.HandshakeTimeoutMS = 500
	c.RBAC.Config = &rbac.Config{AuthFunctionID: "gate::auth", OnFunctionRegistration: "gate::on-fn",
		Expose: []rbac.Filter{{Match: "api::*"}, {Match: "engine::functions::list"}}}
	return c
}

func gateCalls() *fakeCalls {
	return &fakeCalls{fns: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){
		"gate::auth": func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
			var a rbac.AuthInput
			_ = json.Unmarshal(in, &a)
			switch a.Headers["x-test-token"] {
			case "good":
				return json.RawMessage(`{"context":{"user":"alice"},"function_registration_prefix":"t1"}`), nil
			case "slow":
				<-ctx.Done()
				return nil, ctx.Err()
			case "null":
				return json.RawMessage("null"), nil
			}
			return nil, protocol.NewError("invocation_failed", "invalid token")
		},
		"gate::on-fn": func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
			if strings.Contains(string(in), "denied::") {
				return json.RawMessage("false"), nil
			}
			return json.RawMessage("{}"), nil
		},
		"gate::middleware": func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
			if strings.Contains(string(in), `"block":true`) {
				return nil, protocol.NewError("invocation_failed", "blocked by middleware")
			}
			return json.RawMessage(`{"via":"middleware"}`), nil
		},
	}}
}

func startProxy(t *testing.T, cfg Config, calls Caller) *Proxy {
	t.Helper()
	if err := cfg.Check(os.Getenv(protocol.EnvURL)); err != nil {
		t.Fatal(err)
	}
	p := New(cfg, calls, "1.2.3", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := p.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, p *Proxy, token string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+p.Addr().String(), &websocket.DialOptions{HTTPHeader: http.Header{"X-Test-Token": {token}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	return ws
}

func read(t *testing.T, ws *websocket.Conn) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := ws.Read(ctx)
	return string(b), err
}

func send(t *testing.T, ws *websocket.Conn, frame string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		t.Fatal(err)
	}
}

func TestRefusedConnections(t *testing.T) {
	e := newFakeEngine(t)
	p := startProxy(t, gateConfig(e.url()), gateCalls())
	for token, want := range map[string]string{
		"bad":  `{"error":{"code":"AUTH_ERROR","message":"auth function gate::auth refused the connection: invocation_failed: invalid token"},"type":"error"}`,
		"slow": `{"error":{"code":"AUTH_ERROR","message":"auth function gate::auth refused the connection: TIMEOUT: gate::auth did not answer within 500ms"},"type":"error"}`,
		"null": `{"error":{"code":"AUTH_ERROR","message":"the auth function returned no result"},"type":"error"}`,
	} {
		ws := dial(t, p, token)
		got, err := read(t, ws)
		if err != nil || got != want {
			t.Errorf("%s: frame %s (%v), want %s", token, got, err, want)
		}
		_, err = read(t, ws)
		if websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "AUTH_ERROR") {
			t.Errorf("%s: close %v, want 1008 AUTH_ERROR", token, err)
		}
	}
	select {
	case <-e.conns:
		t.Error("a refused connection reached the engine")
	default:
	}
}

func TestGatedSession(t *testing.T) {
	e := newFakeEngine(t)
	p := startProxy(t, gateConfig(e.url()), gateCalls())
	ws := dial(t, p, "good")
	up := e.conn(t)

	// A function no filter exposes: FORBIDDEN from the proxy, never sent on.
	send(t, ws, `{"type":"invokefunction","invocation_id":"i1","function_id":"hidden::secret","data":{}}`)
	got, _ := read(t, ws)
	want := `"function 'hidden::secret' in namespace 'default' is not allowed on rbac-proxy: it matches none of the listener's rbac.expose_functions and the auth function did not allow it"`
	if !strings.Contains(got, `"code":"FORBIDDEN"`) || !strings.Contains(got, want) || !strings.Contains(got, `"invocation_id":"i1"`) {
		t.Errorf("hidden call answered %s", got)
	}

	// The hook refuses denied::x (registrationrejected, not sent on) and admits ok, prefixed.
	send(t, ws, `{"type":"registerfunction","id":"denied::x"}`)
	got, _ = read(t, ws)
	if !strings.Contains(got, `"type":"registrationrejected"`) || !strings.Contains(got, `"function_id":"denied::x"`) {
		t.Errorf("refused registration answered %s", got)
	}
	send(t, ws, `{"type":"registerfunction","id":"ok","description":"d"}`)
	if f := e.next(t); !strings.Contains(f, `"id":"t1::ok"`) {
		t.Errorf("the engine got %s, want the prefixed registration", f)
	}

	// An exposed call goes through; the engine's call of the prefixed function reaches the worker
	// under its own id.
	send(t, ws, `{"type":"invokefunction","invocation_id":"i2","function_id":"api::echo","data":{"a":1}}`)
	if f := e.next(t); !strings.Contains(f, `"function_id":"api::echo"`) {
		t.Errorf("the engine got %s", f)
	}
	ctx := context.Background()
	_ = up.Write(ctx, websocket.MessageText, []byte(`{"type":"invokefunction","invocation_id":"e1","function_id":"t1::ok","data":{}}`))
	if got, _ = read(t, ws); !strings.Contains(got, `"function_id":"ok"`) {
		t.Errorf("the worker got %s, want its own id", got)
	}

	// engine::functions::list lists only what the session may call.
	send(t, ws, `{"type":"invokefunction","invocation_id":"i3","function_id":"engine::functions::list","data":{}}`)
	e.next(t)
	_ = up.Write(ctx, websocket.MessageText, []byte(`{"type":"invocationresult","invocation_id":"i3","result":{"functions":[`+
		`{"function_id":"api::echo","namespace":"default","worker_id":"w"},{"function_id":"hidden::secret","namespace":"default","worker_id":"w"},`+
		`{"function_id":"engine::log::info","namespace":"default","worker_id":"engine"}]}}`))
	got, _ = read(t, ws)
	if !strings.Contains(got, "api::echo") || !strings.Contains(got, "engine::log::info") || strings.Contains(got, "hidden::secret") {
		t.Errorf("listed %s", got)
	}
	if st := p.Status(); st.ActiveConnections != 1 || !st.RBACEnabled || st.Version != "1.2.3" {
		t.Errorf("status %+v", st)
	}

	// The engine closing its side closes the worker's, with the engine's status.
	_ = up.Close(websocket.StatusPolicyViolation, "REGISTRATION_TIMEOUT")
	_, err := read(t, ws)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "REGISTRATION_TIMEOUT") {
		t.Errorf("close %v", err)
	}
}

func TestMiddlewareAndNamespaces(t *testing.T) {
	e := newFakeEngine(t)
	cfg := gateConfig(e.url())
	cfg.MiddlewareFunctionID = "gate::middleware"
	calls := gateCalls()
	calls.fns["gate::auth"] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"namespaces":{"team":["*"]},"context":{"user":"bob"}}`), nil
	}
	p := startProxy(t, cfg, calls)
	ws := dial(t, p, "")
	e.conn(t)
	send(t, ws, `{"type":"invokefunction","invocation_id":"i1","function_id":"api::echo","data":{"block":true}}`)
	if got, _ := read(t, ws); !strings.Contains(got, "blocked by middleware") {
		t.Errorf("a blocked call answered %s", got)
	}
	send(t, ws, `{"type":"invokefunction","invocation_id":"i2","function_id":"api::echo","data":{"a":1}}`)
	if got, _ := read(t, ws); !strings.Contains(got, `"result":{"via":"middleware"}`) {
		t.Errorf("a call through the middleware answered %s", got)
	}
	calls.mu.Lock()
	last := calls.calls[len(calls.calls)-1]
	calls.mu.Unlock()
	if last != `gate::middleware {"function_id":"api::echo","payload":{"a":1},"context":{"user":"bob"},"namespace":"default"}` {
		t.Errorf("middleware called with %s", last)
	}
	// Scoped to namespace team: registering as a worker of default is refused, and the socket closed.
	send(t, ws, `{"type":"invokefunction","invocation_id":"i3","function_id":"engine::workers::register","data":{"name":"w"}}`)
	if got, _ := read(t, ws); !strings.Contains(got, "FORBIDDEN") {
		t.Errorf("register answered %s", got)
	}
	if got, _ := read(t, ws); !strings.Contains(got, "registrationrejected") {
		t.Errorf("then %s", got)
	}
	_, err := read(t, ws)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("close %v", err)
	}
}

func TestEngineUnreachable(t *testing.T) {
	cfg := gateConfig("ws://127.0.0.1:1")
	cfg.RBAC.AuthFunctionID = ""
	p := startProxy(t, cfg, gateCalls())
	ws := dial(t, p, "")
	got, _ := read(t, ws)
	if !strings.Contains(got, "ENGINE_UNREACHABLE") {
		t.Errorf("frame %s", got)
	}
	_, err := read(t, ws)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusInternalError {
		t.Errorf("close %v", err)
	}
}

func TestChannelStream(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != protocol.ChannelPathPrefix+"ch1" || r.URL.Query().Get("key") != "k" {
			http.Error(w, "wrong channel access key", http.StatusForbidden)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		for { // echo
			typ, b, err := ws.Read(context.Background())
			if err != nil || ws.Write(context.Background(), typ, b) != nil {
				return
			}
		}
	}))
	defer engine.Close()
	calls := gateCalls()
	p := startProxy(t, gateConfig("ws"+strings.TrimPrefix(engine.URL, "http")), calls)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	base := "ws://" + p.Addr().String() + protocol.ChannelPathPrefix
	ws, _, err := websocket.Dial(ctx, base+"ch1?key=k", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	for _, typ := range []websocket.MessageType{websocket.MessageBinary, websocket.MessageText} {
		if err := ws.Write(ctx, typ, []byte(`{"type":"invokefunction","function_id":"hidden::secret"}`)); err != nil {
			t.Fatal(err)
		}
		if got, b, err := ws.Read(ctx); err != nil || got != typ || !strings.Contains(string(b), "hidden::secret") {
			t.Errorf("echo %v %s %v: a channel frame is passed unchanged", got, b, err)
		}
	}
	_, resp, err := websocket.Dial(ctx, base+"ch1?key=wrong", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a wrong key: %v %v, want the engine's 403", resp, err)
	}
	calls.mu.Lock()
	defer calls.mu.Unlock()
	if len(calls.calls) != 0 {
		t.Errorf("a channel stream called %v; the engine admits it by its key", calls.calls)
	}
}
