package testscripts

import (
	"context"
	"os"
	"time"

	"github.com/coder/websocket"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/protocol"
)

func init() {
	registerCmd("telemetryframe", cmdTelemetryFrame)
}

// telemetryframe URL SIGNAL FILE: on a worker connection to the engine at URL, send one SDK
// telemetry frame (a binary frame of the 4-byte SIGNAL, OTLP, MTRC or LOGS, then FILE's bytes),
// then a ping; returns once the pong is back, so the engine has taken the frame.
func cmdTelemetryFrame(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 || len(args[1]) != 4 || neg {
		ts.Fatalf("usage: telemetryframe URL SIGNAL FILE")
	}
	body, err := os.ReadFile(ts.MkAbs(args[2]))
	ts.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, args[0], nil)
	ts.Check(err)
	defer c.CloseNow()
	c.SetReadLimit(protocol.MaxFrameBytes)
	ts.Check(c.Write(ctx, websocket.MessageBinary, append([]byte(args[1]), body...)))
	ts.Check(c.Write(ctx, websocket.MessageText, []byte(`{"type":"ping"}`)))
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			ts.Fatalf("telemetryframe: no pong: %v", err)
		}
		if m, err := protocol.Decode(b); err == nil && m.Type == protocol.TypePong {
			return
		}
	}
}
