package core

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/httpfn"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

// An HTTP-invoked function registered by a raw socket is served by the engine over HTTP (from
// another worker, async path, and from the engine, dispatch path), is listed as the registering
// worker's, and goes away when that worker disconnects.
func TestHTTPInvokedFunctionServedAndOwned(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"got":` + string(b) + `,"fn":"` + r.Header.Get("x-iii-Function-Path") + `"}`))
	}))
	defer srv.Close()
	inv, err := httpfn.New(httpfn.Security{URLAllowlist: []string{"127.0.0.1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := New(Options{HTTP: inv})
	url := enginetest.Start(t, e).URL
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for _, f := range []string{
		`{"type":"invokefunction","invocation_id":"r1","function_id":"engine::workers::register","data":{"name":"hooker"}}`,
		`{"type":"registerfunction","id":"x::h","description":"hook","invocation":{"url":"` + srv.URL + `/h","method":"POST","timeout_ms":2000}}`,
	} {
		if err := c.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	if !enginetest.Poll(5*time.Second, func() bool { _, ok := e.Lookup("default", "x::h"); return ok }) {
		t.Fatal("x::h never registered")
	}
	cl := enginetest.Worker(t, url, "default", nil)
	out, err := cl.Call(ctx, "x::h", map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"got":{"a":1},"fn":"x::h"}` {
		t.Errorf("worker call result %s", out)
	}
	res, perr := e.Invoke(ctx, "default", "x::h", json.RawMessage(`[2]`), 2*time.Second)
	if perr != nil || string(res) != `{"got":[2],"fn":"x::h"}` {
		t.Errorf("engine call: %s %v", res, perr)
	}
	list, perr := e.Invoke(ctx, "default", protocol.FnListFunctions, nil, time.Second)
	if perr != nil || !strings.Contains(string(list), `"function_id":"x::h","namespace":"default","description":"hook","worker_id":"`) ||
		!strings.Contains(string(list), `"worker_name":"hooker"`) {
		t.Errorf("engine::functions::list: %s %v", list, perr)
	}
	c.Close(websocket.StatusNormalClosure, "")
	if !enginetest.Poll(5*time.Second, func() bool { _, ok := e.Lookup("default", "x::h"); return !ok }) {
		t.Fatal("x::h stayed after its worker left")
	}
	if _, err := cl.Call(ctx, "x::h", nil); code(err) != errcode.FunctionNotFound {
		t.Errorf("call after disconnect: %v", err)
	}
}

// A session of a gated listener may register an HTTP-invoked function, but not one whose calls
// carry a secret of the engine: it could call it and have the secret act for it. A worker of
// the main listener may.
func TestGatedSessionRegistersNoAuthenticatedHTTPFunction(t *testing.T) {
	inv, err := httpfn.New(httpfn.Security{URLAllowlist: []string{"127.0.0.1"}, BlockPrivateIPs: false,
		Secrets: map[string]httpfn.Secret{"HOOK": {Env: "HOOK", Hosts: []string{"127.0.0.1"}}}},
		func(k string) (string, bool) { return "s3cret", k == "HOOK" })
	if err != nil {
		t.Fatal(err)
	}
	e, urls := serveListenersWith(t, Options{HTTP: inv},
		Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{Expose: []rbac.Filter{{Match: "api::*"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	register := func(url, id, auth string) *websocket.Conn {
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
		f := `{"type":"registerfunction","id":"` + id + `","invocation":{"url":"http://127.0.0.1:9/h","method":"POST"` + auth + `}}`
		if err := c.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	const bearer = `,"auth":{"type":"bearer","token_key":"HOOK"}`
	sess := register(urls[1], "api::hook", bearer)
	for {
		_, b, err := sess.Read(ctx)
		if err != nil {
			t.Fatalf("no registrationrejected: %v", err)
		}
		var m protocol.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Type == protocol.TypeRegistrationRejected {
			if m.Code != errcode.Forbidden || m.FunctionID != "api::hook" {
				t.Errorf("the session's authenticated registration was answered %s, want registrationrejected FORBIDDEN", b)
			}
			break
		}
	}
	register(urls[1], "api::plain", "")
	register(urls[0], "x::hook", bearer)
	var plain, trusted bool
	both := func() bool {
		_, plain = e.Lookup("default", "api::plain")
		_, trusted = e.Lookup("default", "x::hook")
		return plain && trusted
	}
	if !enginetest.Poll(5*time.Second, both) {
		t.Fatalf("registered: session's plain function %v, main listener's authenticated one %v; want both", plain, trusted)
	}
	if _, ok := e.Lookup("default", "api::hook"); ok {
		t.Error("the session's authenticated function was registered")
	}
}
