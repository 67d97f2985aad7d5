package httpworker

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

func server(t *testing.T) *httptest.Server {
	t.Helper()
	call := func(_ context.Context, _ protocol.Trigger, fn string, payload any, _ time.Duration) (json.RawMessage, error) {
		b, _ := json.Marshal(payload)
		switch fn {
		case "api::echo":
			return json.Marshal(map[string]any{"status_code": 201, "headers": map[string]string{"X-Echo": "1"}, "body": json.RawMessage(b)})
		case "api::text":
			return json.RawMessage(`{"body":"plain"}`), nil
		case "api::never":
			return json.RawMessage(`false`), nil
		case "api::boom":
			return nil, protocol.NewError("invocation_failed", "boom")
		}
		return nil, protocol.NewError("function_not_found", "%s", fn)
	}
	cfg := Defaults()
	cfg.MaxBodyBytes = 64
	cfg.CORS.AllowedOrigins = []string{"https://app.example"}
	s := New(cfg, call, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for id, c := range map[string]string{
		"a": `{"api_path":"users/:id/orders/{order}","http_method":"POST"}`,
		"b": `{"api_path":"/users/me/orders/{order}","http_method":"POST","condition_function_id":"api::never"}`,
		"c": `{"api_path":"/text","http_method":"GET"}`,
		"d": `{"api_path":"/boom"}`,
	} {
		fn := map[string]string{"a": "api::echo", "b": "api::echo", "c": "api::text", "d": "api::boom"}[id]
		if err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: id, FunctionID: fn, Config: json.RawMessage(c)}); err != nil {
			t.Fatal(err)
		}
	}
	err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: "e", FunctionID: "x", Config: json.RawMessage(`{"api_path":"/users/:uid/orders/:o","http_method":"post"}`)})
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != CodeRouteConflict {
		t.Errorf("conflicting route: %v", err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

func do(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestRoutes(t *testing.T) {
	ts := server(t)
	res, body := do(t, "POST", ts.URL+"/users/42/orders/7?x=1&y=a&y=b", `{"n":1}`, map[string]string{"Content-Type": "application/json", "Origin": "https://app.example"})
	if res.StatusCode != 201 || res.Header.Get("X-Echo") != "1" || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("%d %v %s", res.StatusCode, res.Header, body)
	}
	var req map[string]any
	_ = json.Unmarshal([]byte(body), &req)
	want := map[string]any{"id": "42", "order": "7"}
	if pp := req["path_params"].(map[string]any); pp["id"] != want["id"] || pp["order"] != want["order"] {
		t.Errorf("path_params %v", pp)
	}
	if q := req["query_params"].(map[string]any); q["x"] != "1" || len(q["y"].([]any)) != 2 {
		t.Errorf("query_params %v", q)
	}
	if req["method"] != "POST" || req["path"] != "/users/42/orders/7" || req["body"].(map[string]any)["n"] != float64(1) {
		t.Errorf("request %s", body)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/nothing", "", 404},
		{"GET", "/users/1/orders/2", "", 405},
		{"POST", "/users/me/orders/2", "", 422},
		{"POST", "/users/1/orders/2", strings.Repeat("x", 100), 413},
		{"GET", "/boom", "", 500},
		{"GET", "/text", "", 200},
	} {
		res, b := do(t, c.method, ts.URL+c.path, c.body, nil)
		if res.StatusCode != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, res.StatusCode, b, c.status)
		}
		if c.status == 405 && res.Header.Get("Allow") != "POST" {
			t.Errorf("Allow %q", res.Header.Get("Allow"))
		}
		if c.path == "/text" && b != "plain" {
			t.Errorf("text body %q", b)
		}
	}
	res, _ = do(t, "OPTIONS", ts.URL+"/users/1/orders/2", "", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
	if res.StatusCode != 204 || !strings.Contains(res.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight %d %v", res.StatusCode, res.Header)
	}
}

// Keys the worker does not implement refuse the trigger, naming the key, instead of being
// ignored (N4), and so does a middleware_function_ids that is not a list of function ids.
func TestUnsupportedTriggerKeys(t *testing.T) {
	s := New(Defaults(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, c := range []struct{ config, code, want string }{
		{`{"api_path":"/mw","middleware_function_ids":[],"bogus":1}`, CodeTriggerConfigUnsupported, `unknown key "bogus"`},
		{`{"api_path":"/mw","public_webhook":true}`, CodeTriggerConfigUnsupported, `unknown key "public_webhook"`},
		{`{"api_path":"/mw","middleware_function_ids":"auth::deny"}`, "INVALID_ARGUMENTS", "middleware_function_ids?: [function id, ...]"},
		{`{"api_path":"/mw","middleware_function_ids":["a",""]}`, "INVALID_ARGUMENTS", "middleware_function_ids[1] is empty"},
	} {
		err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: "m", FunctionID: "t::http", Config: json.RawMessage(c.config)})
		pe, ok := err.(*protocol.Error)
		if !ok || pe.Code != c.code || !strings.Contains(pe.Message, c.want) {
			t.Errorf("%s: %v, want %s mentioning %s", c.config, err, c.code, c.want)
		}
	}
	if len(s.routes) != 0 {
		t.Errorf("refused triggers were routed: %v", s.routes)
	}
	// description is iii's documented descriptive key: kept, the route served.
	if err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: "d", FunctionID: "t::http",
		Config: json.RawMessage(`{"api_path":"health","http_method":"GET","description":"Healthcheck endpoint"}`)}); err != nil || len(s.routes) != 1 {
		t.Errorf("description: %v, routes %v", err, s.routes)
	}
}

// A NUL in a path parameter (%00) is refused with 400; "." and ".." reach the function as they
// are, and matching never resolves dot segments. A raw NUL in the request line never reaches
// routing: net/http answers it 400 itself.
func TestPathParameters(t *testing.T) {
	ts := server(t)
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "POST /users/a\x00b/orders/7 HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || res.StatusCode != 400 {
		t.Errorf("raw NUL: %v %v", res, err)
	}
	for _, c := range []struct {
		path   string
		status int
		id     string
	}{
		{"/users/%00/orders/7", 400, ""},
		{"/users/a%00b/orders/7", 400, ""},
		{"/users/../orders/7", 201, ".."},
		{"/users/%2e%2e/orders/7", 201, ".."},
		{"/users/./orders/7", 201, "."},
		{"/users/x/../users/1/orders/7", 404, ""},
	} {
		req, _ := http.NewRequest("POST", ts.URL, nil)
		req.URL.Opaque = c.path // sent as written: no client-side cleaning
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.status {
			t.Errorf("%s: %d %s, want %d", c.path, res.StatusCode, b, c.status)
			continue
		}
		if c.status == 400 && !strings.Contains(string(b), CodeInvalidPathParameter) {
			t.Errorf("%s: %s", c.path, b)
		}
		if c.id != "" {
			var got struct {
				PathParams map[string]string `json:"path_params"`
			}
			_ = json.Unmarshal(b, &got)
			if got.PathParams["id"] != c.id {
				t.Errorf("%s: path_params %v, want id %q", c.path, got.PathParams, c.id)
			}
		}
	}
}
