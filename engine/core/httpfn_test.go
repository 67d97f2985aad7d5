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

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/httpfn"
	"github.com/iii-go/iii/engine/protocol"
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
	e, url := startEngine(t, Options{HTTP: inv})
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := e.Lookup("default", "x::h"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("x::h never registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cl := worker(t, url, "default", nil)
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
	for {
		if _, ok := e.Lookup("default", "x::h"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("x::h stayed after its worker left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := cl.Call(ctx, "x::h", nil); code(err) != errcode.FunctionNotFound {
		t.Errorf("call after disconnect: %v", err)
	}
}
