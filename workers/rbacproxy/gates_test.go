package rbacproxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/protocol"
)

// A worker's binary frame reaches the engine only when it is telemetry: before, every binary
// frame was forwarded unchecked, and the engine decoded one holding JSON as a protocol message.
func TestBinaryFramesOnlyTelemetry(t *testing.T) {
	e := newFakeEngine(t)
	p := startProxy(t, gateConfig(e.url()), gateCalls())
	ws := dial(t, p, "good")
	e.conn(t)
	ctx := context.Background()
	for _, f := range []string{
		`{"type":"invokefunction","invocation_id":"b1","function_id":"hidden::secret","data":{}}`,
		`{"type":"registerfunction","id":"hidden::mine"}`,
		`OTLP{"resourceSpans":[]}`,
		`MTRC{}`,
	} {
		if err := ws.Write(ctx, websocket.MessageBinary, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	send(t, ws, `{"type":"registerfunction","id":"ok"}`)
	var got []string
	for len(got) == 0 || !strings.Contains(got[len(got)-1], `"registerfunction"`) {
		got = append(got, e.next(t))
	}
	if strings.Join(got, "\n") != "OTLP{\"resourceSpans\":[]}\nMTRC{}\n"+`{"type":"registerfunction","id":"t1::ok"}` {
		t.Errorf("the engine got:\n%s", strings.Join(got, "\n"))
	}
}

// noPrefixCalls admits every connection without a function_registration_prefix.
func noPrefixCalls() *fakeCalls {
	c := gateCalls()
	c.fns["gate::auth"] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"allowed_functions":["allowed::fn"]}`), nil
	}
	return c
}

// The functions the proxy calls to enforce its gate (auth, hooks, middleware) may not be
// registered through it: a session serving them would decide every later session's rights.
func TestGateFunctionsNotRegistrable(t *testing.T) {
	e := newFakeEngine(t)
	cfg := gateConfig(e.url())
	cfg.MiddlewareFunctionID = "gate::middleware"
	p := startProxy(t, cfg, noPrefixCalls())
	ws := dial(t, p, "x")
	e.conn(t)
	for _, id := range []string{"gate::auth", "gate::on-fn", "gate::middleware"} {
		send(t, ws, `{"type":"registerfunction","id":"`+id+`"}`)
		got, _ := read(t, ws)
		if !strings.Contains(got, `"type":"registrationrejected"`) || !strings.Contains(got, `"code":"FORBIDDEN"`) || !strings.Contains(got, `"function_id":"`+id+`"`) {
			t.Errorf("%s: answered %s", id, got)
		}
	}
	send(t, ws, `{"type":"registerfunction","id":"mine::fn"}`)
	if f := e.next(t); f != `{"type":"registerfunction","id":"mine::fn"}` {
		t.Errorf("the engine got %s, want only mine::fn", f)
	}
}

// engineReply answers the proxy's frames on up: engine::workers::register and
// engine::functions::info calls succeed; a registerfunction of an id in reject is answered
// registrationrejected. Every other frame goes to frames.
func engineReply(t *testing.T, e *fakeEngine, up *websocket.Conn, reject map[string]bool, frames chan<- string) {
	ctx := context.Background()
	go func() {
		for f := range e.frames {
			m, err := protocol.Decode([]byte(f))
			if err != nil {
				frames <- f
				continue
			}
			switch {
			case m.Type == protocol.TypeInvokeFunction && (m.FunctionID == protocol.FnRegisterWorker || m.FunctionID == "engine::functions::info"):
				b, _ := protocol.Encode(&protocol.Message{Type: protocol.TypeInvocationResult, InvocationID: m.InvocationID, Result: json.RawMessage(`{}`)})
				_ = up.Write(ctx, websocket.MessageText, b)
			case m.Type == protocol.TypeRegisterFunction && reject[m.ID]:
				ns := "default"
				b, _ := protocol.Encode(&protocol.Message{Type: protocol.TypeRegistrationRejected, Code: "FUNCTION_NAMESPACE_CONFLICT", Namespace: &ns, FunctionID: m.ID})
				_ = up.Write(ctx, websocket.MessageText, b)
			default:
				frames <- f
			}
		}
	}()
}

// A session binds a trigger only to functions it may call or that it registered itself and
// the engine kept: a provider calls them with the engine's trusted rights.
func TestTriggerBindsOnlyCallableOrOwn(t *testing.T) {
	e := newFakeEngine(t)
	p := startProxy(t, gateConfig(e.url()), noPrefixCalls())
	ws := dial(t, p, "x")
	up := e.conn(t)
	frames := make(chan string, 64)
	engineReply(t, e, up, map[string]bool{"secret::fn": true}, frames)
	next := func() string {
		select {
		case f := <-frames:
			return f
		case <-time.After(5 * time.Second):
			t.Fatal("the engine got no frame within 5s")
			return ""
		}
	}
	// As iii-sdk does: registrations first, engine::workers::register last.
	send(t, ws, `{"type":"registerfunction","id":"mine::handler"}`)
	send(t, ws, `{"type":"registerfunction","id":"secret::fn"}`) // the engine rejects it: a trusted worker serves it
	send(t, ws, `{"type":"registertrigger","id":"t-own","trigger_type":"http","function_id":"mine::handler","config":{"api_path":"/a"}}`)
	send(t, ws, `{"type":"invokefunction","invocation_id":"r1","function_id":"engine::workers::register","data":{"name":"w"}}`)
	send(t, ws, `{"type":"registertrigger","id":"t-hidden","trigger_type":"http","function_id":"hidden::page","config":{}}`)
	send(t, ws, `{"type":"registertrigger","id":"t-cond","trigger_type":"http","function_id":"mine::handler","config":{"condition_function_id":"hidden::page"}}`)
	send(t, ws, `{"type":"registertrigger","id":"t-stolen","trigger_type":"http","function_id":"secret::fn","config":{}}`)
	send(t, ws, `{"type":"registertrigger","id":"t-api","trigger_type":"http","function_id":"api::echo","config":{"middleware_function_ids":["allowed::fn"]}}`)
	if f := next(); !strings.Contains(f, `"id":"mine::handler"`) {
		t.Errorf("the engine got %s, want the registration of mine::handler", f)
	}
	forwarded := map[string]bool{}
	for len(forwarded) < 2 {
		m, _ := protocol.Decode([]byte(next()))
		if m.Type == protocol.TypeRegisterTrigger {
			forwarded[m.ID] = true
		}
	}
	if !forwarded["t-own"] || !forwarded["t-api"] {
		t.Errorf("forwarded %v, want t-own and t-api", forwarded)
	}
	refused := map[string]string{}
	for len(refused) < 3 {
		got, err := read(t, ws)
		if err != nil {
			t.Fatalf("refusals %v: %v", refused, err)
		}
		m, _ := protocol.Decode([]byte(got))
		if m.Type == protocol.TypeTriggerRegistrationResult && m.Error != nil {
			refused[m.ID] = m.Error.Code + " " + m.Error.Message
		}
	}
	for id, name := range map[string]string{"t-hidden": "hidden::page", "t-cond": "hidden::page", "t-stolen": "secret::fn"} {
		if !strings.HasPrefix(refused[id], "FORBIDDEN ") || !strings.Contains(refused[id], name) {
			t.Errorf("%s: %q, want FORBIDDEN naming %s", id, refused[id], name)
		}
	}
	select {
	case f := <-frames:
		t.Errorf("a refused trigger reached the engine: %s", f)
	default:
	}
}

// A session of the proxy may not take a trigger type over from the worker providing it (the
// engine sees the proxy's connections as trusted, so the proxy checks): before, it became the
// provider and received every trigger of the type.
func TestTriggerTypeNotTakenOver(t *testing.T) {
	e := newFakeEngine(t)
	calls := noPrefixCalls()
	calls.fns["gate::auth"] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"allow_trigger_type_registration":true}`), nil
	}
	calls.fns["engine::triggers::list"] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"triggers":[{"id":"http","namespace":"default","worker_id":"http-worker"}]}`), nil
	}
	p := startProxy(t, gateConfig(e.url()), calls)
	ws := dial(t, p, "x")
	e.conn(t)
	send(t, ws, `{"type":"registertriggertype","id":"http"}`)
	send(t, ws, `{"type":"registertriggertype","id":"mine"}`)
	if f := e.next(t); f != `{"type":"registertriggertype","id":"mine"}` {
		t.Errorf("the engine got %s, want only the type nobody provides", f)
	}
}
