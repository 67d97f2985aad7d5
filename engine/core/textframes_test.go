package core

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
)

// rawFrames dials url, sends each frame (binary when bin), then a text ping, and returns the
// types of the frames the engine sent until the pong and results more invocationresults (one
// as "invocationresult ok|CODE").
func rawFrames(t *testing.T, url string, bin bool, results int, frames ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	typ := websocket.MessageText
	if bin {
		typ = websocket.MessageBinary
	}
	for _, f := range frames {
		if err := ws.Write(ctx, typ, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	var got []string
	pong := false
	for !pong || results > 0 {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("no pong: %v (got %v)", err, got)
		}
		m, err := protocol.Decode(b)
		if err != nil {
			t.Fatalf("engine sent %s: %v", b, err)
		}
		switch {
		case m.Type == protocol.TypePong:
			pong = true
		case m.Type == protocol.TypeWorkerRegistered:
		case m.Type == protocol.TypeInvocationResult && m.Error != nil:
			got, results = append(got, m.Type+" "+m.Error.Code), results-1
		case m.Type == protocol.TypeInvocationResult:
			got, results = append(got, m.Type+" ok"), results-1
		default:
			got = append(got, m.Type)
		}
	}
	return got
}

// Protocol messages are read from text frames only: the same invokefunction that a gated
// listener answers FORBIDDEN in a text frame is not handled at all in a binary one (before, it
// was decoded and served, which let any proxy that forwards binary frames unchecked be gone
// around); telemetry frames still reach the observer.
func TestBinaryFramesCarryNoProtocol(t *testing.T) {
	l := Listener{Name: "pub", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{}}
	_, urls := serveListeners(t, l)
	client(t, urls[0], "", map[string]protocol.Handler{"secret::fn": echo("secret::fn")})
	call := `{"type":"invokefunction","invocation_id":"11111111-1111-1111-1111-111111111111","function_id":"secret::fn","data":{}}`
	if got := rawFrames(t, urls[1], false, 1, call); strings.Join(got, ",") != "invocationresult FORBIDDEN" {
		t.Errorf("text frame on the gated listener: %v", got)
	}
	if got := rawFrames(t, urls[0], false, 1, call); strings.Join(got, ",") != "invocationresult ok" {
		t.Errorf("text frame on the trusted listener: %v", got)
	}
	for i, url := range urls {
		if got := rawFrames(t, url, true, 0, call); len(got) != 0 {
			t.Errorf("binary invokefunction on listener %d was handled: %v", i, got)
		}
	}
	reg := `{"type":"registerfunction","id":"bin::fn"}`
	rawFrames(t, urls[0], true, 0, reg, `{"type":"invokefunction","function_id":"engine::workers::register","data":{"name":"bin"}}`)
	w := client(t, urls[0], "", nil)
	if _, ok := listed(t, w)["bin::fn"]; ok {
		t.Error("a registerfunction in a binary frame was applied")
	}
}
