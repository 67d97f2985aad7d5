package httpworker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
