package httpworker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// fn is a fake function: it gets the call's payload and answers.
type fn func(in map[string]any) (any, error)

// mwServer serves the routes (trigger config by function id) with the fake functions fns and
// the global middleware of cfg; calls lists the functions called, in order; logs is the log.
func mwServer(t *testing.T, cfg Config, fns map[string]fn, routes map[string]string) (ts *httptest.Server, calls func() []string, logs *bytes.Buffer) {
	t.Helper()
	var mu sync.Mutex
	var called []string
	call := func(_ context.Context, _ protocol.Trigger, id string, payload any, _ time.Duration) (json.RawMessage, error) {
		mu.Lock()
		called = append(called, id)
		mu.Unlock()
		f, ok := fns[id]
		if !ok {
			return nil, protocol.NewError(errcode.FunctionNotFound, "function %s not found", id)
		}
		b, _ := json.Marshal(payload)
		var in map[string]any
		_ = json.Unmarshal(b, &in)
		out, err := f(in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
	logs = &bytes.Buffer{}
	s := New(cfg, call, slog.New(slog.NewJSONHandler(logs, nil)))
	for id, c := range routes {
		if err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: "t-" + id, FunctionID: id, Config: json.RawMessage(c)}); err != nil {
			t.Fatal(err)
		}
	}
	ts = httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), called...)
	}, logs
}

func cont(ctx map[string]any) fn {
	return func(map[string]any) (any, error) { return map[string]any{"action": "continue", "context": ctx}, nil }
}

func echo(in map[string]any) (any, error) {
	return map[string]any{"status_code": 200, "body": in}, nil
}

// Global middleware runs first, by priority (ties in list order), then the condition, then the
// route's middleware in list order, then the handler; each middleware gets {phase, request
// without body, context so far}, and the handler gets the merged context.
func TestMiddlewareOrderAndContext(t *testing.T) {
	cfg := Defaults()
	cfg.Middleware = []Middleware{{FunctionID: "g::late", Priority: 10}, {FunctionID: "g::first", Priority: 5, Phase: "preHandler"}, {FunctionID: "g::second", Priority: 5}}
	var seen []map[string]any
	var mu sync.Mutex
	record := func(next fn) fn {
		return func(in map[string]any) (any, error) {
			mu.Lock()
			seen = append(seen, in)
			mu.Unlock()
			return next(in)
		}
	}
	ts, calls, _ := mwServer(t, cfg, map[string]fn{
		"g::first":  record(cont(map[string]any{"user": "u1"})),
		"g::second": record(cont(nil)),
		"g::late":   record(cont(map[string]any{"tenant": "t1"})),
		"api::cond": func(in map[string]any) (any, error) { return in["context"].(map[string]any)["user"] == "u1", nil },
		"r::one":    record(cont(map[string]any{"user": "u2", "scope": "read"})),
		"r::two":    record(func(map[string]any) (any, error) { return map[string]any{"action": "continue"}, nil }),
		"api::h":    echo,
	}, map[string]string{"api::h": `{"api_path":"/items/:id","http_method":"POST","condition_function_id":"api::cond","middleware_function_ids":["r::one","r::two"]}`})

	res, body := do(t, "POST", ts.URL+"/items/7?q=1", `{"secret":1}`, map[string]string{"Content-Type": "application/json", "X-Team": "blue"})
	if res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	if diff := cmp.Diff([]string{"g::first", "g::second", "g::late", "api::cond", "r::one", "r::two", "api::h"}, calls()); diff != "" {
		t.Errorf("call order (-want +got):\n%s", diff)
	}
	var got map[string]any
	_ = json.Unmarshal([]byte(body), &got)
	if diff := cmp.Diff(map[string]any{"user": "u2", "tenant": "t1", "scope": "read"}, got["context"]); diff != "" {
		t.Errorf("handler context (-want +got):\n%s", diff)
	}
	first := seen[0]
	req := first["request"].(map[string]any)
	if first["phase"] != "preHandler" || req["method"] != "POST" || req["path"] != "/items/7" ||
		req["path_params"].(map[string]any)["id"] != "7" || req["query_params"].(map[string]any)["q"] != "1" ||
		req["headers"].(map[string]any)["x-team"] != "blue" {
		t.Errorf("middleware input %v", first)
	}
	if _, ok := req["body"]; ok {
		t.Errorf("middleware got the body: %v", req)
	}
	if diff := cmp.Diff(map[string]any{}, first["context"]); diff != "" {
		t.Errorf("first middleware context:\n%s", diff)
	}
	// r::one (the fourth recorded) sees what the global chain added.
	if diff := cmp.Diff(map[string]any{"user": "u1", "tenant": "t1"}, seen[3]["context"]); diff != "" {
		t.Errorf("route middleware context (-want +got):\n%s", diff)
	}
}

// A middleware that answers "respond" is the response: nothing after it runs.
func TestMiddlewareShortCircuit(t *testing.T) {
	cfg := Defaults()
	cfg.Middleware = []Middleware{{FunctionID: "g::ok"}}
	ts, calls, _ := mwServer(t, cfg, map[string]fn{
		"g::ok": cont(nil),
		"r::deny": func(in map[string]any) (any, error) {
			if in["request"].(map[string]any)["headers"].(map[string]any)["x-key"] == "k" {
				return map[string]any{"action": "continue"}, nil
			}
			return map[string]any{"action": "respond", "response": map[string]any{"status_code": 403,
				"headers": map[string]string{"X-Rejected-By": "r::deny"}, "body": map[string]any{"error": "Forbidden"}}}, nil
		},
		"r::after": cont(nil),
		"api::h":   echo,
	}, map[string]string{"api::h": `{"api_path":"/admin","middleware_function_ids":["r::deny","r::after"]}`})

	res, body := do(t, "GET", ts.URL+"/admin", "", nil)
	if res.StatusCode != 403 || res.Header.Get("X-Rejected-By") != "r::deny" || strings.TrimSpace(body) != `{"error":"Forbidden"}` {
		t.Errorf("refused: %d %v %s", res.StatusCode, res.Header, body)
	}
	if diff := cmp.Diff([]string{"g::ok", "r::deny"}, calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if res, body := do(t, "GET", ts.URL+"/admin", "", map[string]string{"X-Key": "k"}); res.StatusCode != 200 {
		t.Errorf("allowed: %d %s", res.StatusCode, body)
	}
}

type errBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		ErrorID string `json:"error_id"`
	} `json:"error"`
	Skipped bool `json:"skipped"`
}

// A middleware that fails, times out or answers anything but continue/respond is answered with
// the error envelope, and the route's function is never called; a 5xx has an error_id that is
// in the log.
func TestMiddlewareFailures(t *testing.T) {
	cfg := Defaults()
	fns := map[string]fn{
		"mw::boom": func(map[string]any) (any, error) {
			return nil, protocol.NewError("AUTH_DOWN", "auth store unreachable")
		},
		"mw::slow": func(map[string]any) (any, error) {
			return nil, protocol.NewError(errcode.Timeout, "no answer within 30000 ms")
		},
		"mw::bogus":   func(map[string]any) (any, error) { return map[string]any{"allow": true}, nil },
		"mw::nothing": func(map[string]any) (any, error) { return nil, nil },
		"mw::badctx":  func(map[string]any) (any, error) { return map[string]any{"action": "continue", "context": "x"}, nil },
		"api::h":      echo,
	}
	routes := map[string]string{}
	for _, mw := range []string{"mw::boom", "mw::slow", "mw::bogus", "mw::nothing", "mw::badctx", "mw::missing"} {
		name := strings.TrimPrefix(mw, "mw::")
		fns["api::"+name] = echo
		routes["api::"+name] = `{"api_path":"/` + name + `","middleware_function_ids":["` + mw + `"]}`
	}
	ts, calls, logs := mwServer(t, cfg, fns, routes)
	for _, c := range []struct {
		path   string
		status int
		code   string
		msg    string
	}{
		{"/boom", 500, "AUTH_DOWN", "auth store unreachable"},
		{"/slow", 504, CodeMiddlewareTimeout, "middleware mw::slow did not answer"},
		{"/bogus", 500, CodeInternalError, `answered {"allow":true}`},
		{"/nothing", 500, CodeInternalError, "answered null"},
		{"/badctx", 500, CodeInternalError, "not an object"},
		{"/missing", 502, errcode.FunctionNotFound, "mw::missing"},
	} {
		res, body := do(t, "GET", ts.URL+c.path, "", nil)
		var eb errBody
		_ = json.Unmarshal([]byte(body), &eb)
		if res.StatusCode != c.status || eb.Error.Code != c.code || !strings.Contains(eb.Error.Message, c.msg) {
			t.Errorf("%s: %d %s, want %d %s %q", c.path, res.StatusCode, body, c.status, c.code, c.msg)
		}
		if _, err := uuid.Parse(eb.Error.ErrorID); err != nil || !strings.Contains(logs.String(), `"error_id":"`+eb.Error.ErrorID+`"`) {
			t.Errorf("%s: error_id %q not a UUID in the log: %v\n%s", c.path, eb.Error.ErrorID, err, logs)
		}
	}
	for _, c := range calls() {
		if strings.HasPrefix(c, "api::") {
			t.Errorf("the route's function %s was called after its middleware failed", c)
		}
	}
}

// The worker's own errors have iii's envelope: a handler failure carries the function's code
// and an error_id that is logged (its stack trace logged, never sent); 404 and 422 have none.
func TestErrorEnvelope(t *testing.T) {
	ts, _, logs := mwServer(t, Defaults(), map[string]fn{
		"api::boom": func(map[string]any) (any, error) {
			return nil, &protocol.Error{Code: "DB_ERROR", Message: "insert failed", Stacktrace: "at db.go:12"}
		},
		"api::slow": func(map[string]any) (any, error) {
			return nil, protocol.NewError(errcode.Timeout, "no answer within 30000 ms")
		},
		"api::no": func(map[string]any) (any, error) { return false, nil },
		"api::h":  echo,
	}, map[string]string{
		"api::boom": `{"api_path":"/boom"}`,
		"api::slow": `{"api_path":"/slow"}`,
		"api::h":    `{"api_path":"/guarded","condition_function_id":"api::no"}`,
	})
	ids := map[string]bool{}
	for _, c := range []struct {
		path    string
		status  int
		code    string
		id      bool
		skipped bool
	}{
		{"/boom", 500, "DB_ERROR", true, false},
		{"/boom", 500, "DB_ERROR", true, false},
		{"/slow", 504, errcode.Timeout, true, false},
		{"/nowhere", 404, CodeNotFound, false, false},
		{"/guarded", 422, CodeConditionNotMet, false, true},
	} {
		res, body := do(t, "GET", ts.URL+c.path, "", nil)
		var eb errBody
		_ = json.Unmarshal([]byte(body), &eb)
		if res.StatusCode != c.status || eb.Error.Code != c.code || eb.Error.Message == "" || (eb.Error.ErrorID != "") != c.id || eb.Skipped != c.skipped {
			t.Errorf("%s: %d %s, want %d %s (error_id %v, skipped %v)", c.path, res.StatusCode, body, c.status, c.code, c.id, c.skipped)
		}
		if strings.Contains(body, "db.go") {
			t.Errorf("%s: the stack trace was sent: %s", c.path, body)
		}
		if c.id {
			if ids[eb.Error.ErrorID] {
				t.Errorf("error_id %s answered twice", eb.Error.ErrorID)
			}
			ids[eb.Error.ErrorID] = true
			if !strings.Contains(logs.String(), `"error_id":"`+eb.Error.ErrorID+`"`) {
				t.Errorf("%s: error_id %s not logged:\n%s", c.path, eb.Error.ErrorID, logs)
			}
		}
	}
	if !strings.Contains(logs.String(), "at db.go:12") {
		t.Errorf("the stack trace was not logged:\n%s", logs)
	}
}

// Global middleware needs a function and the one phase, preHandler.
func TestMiddlewareConfig(t *testing.T) {
	for _, c := range []struct {
		mw   []Middleware
		want string
	}{
		{[]Middleware{{FunctionID: "a"}, {Phase: "preHandler"}}, "middleware[1].function_id must name a function"},
		{[]Middleware{{FunctionID: "a", Phase: "onResponse"}}, `middleware[0].phase "onResponse" is not supported`},
	} {
		cfg := Defaults()
		cfg.Middleware = c.mw
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.mw, err, c.want)
		}
	}
	cfg := Defaults()
	cfg.Middleware = []Middleware{{FunctionID: "a", Phase: "preHandler", Priority: -1}}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
}

// As in iii, the global middleware runs before the body is read: it refuses a request whose
// body is over max_body_bytes, or has not arrived at all, with its own answer (401 here), not
// 413 or 408; the route's condition and middleware still run after the body is read.
func TestGlobalMiddlewareBeforeBody(t *testing.T) {
	cfg := Defaults()
	cfg.MaxBodyBytes = 16
	cfg.Middleware = []Middleware{{FunctionID: "g::auth"}}
	ts, calls, _ := mwServer(t, cfg, map[string]fn{
		"g::auth": func(in map[string]any) (any, error) {
			if in["request"].(map[string]any)["headers"].(map[string]any)["x-key"] == "k" {
				return map[string]any{"action": "continue"}, nil
			}
			return map[string]any{"action": "respond", "response": map[string]any{"status_code": 401, "body": "who are you"}}, nil
		},
		"api::h": echo,
	}, map[string]string{"api::h": `{"api_path":"/upload","http_method":"POST"}`})
	big := strings.Repeat("x", 100)
	if res, body := do(t, "POST", ts.URL+"/upload", big, nil); res.StatusCode != 401 || body != "who are you" {
		t.Errorf("oversized body without the key: %d %s, want the middleware's 401", res.StatusCode, body)
	}
	if res, body := do(t, "POST", ts.URL+"/upload", big, map[string]string{"X-Key": "k"}); res.StatusCode != 413 {
		t.Errorf("oversized body with the key: %d %s, want 413", res.StatusCode, body)
	}
	// A body that never comes: the middleware answers at once, without waiting for it.
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != 401 {
		t.Errorf("body never sent: %v %v, want 401", res, err)
	}
	if diff := cmp.Diff([]string{"g::auth", "g::auth", "g::auth"}, calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}
