// Package benchbase is how the engine's and the workers' benches measure (Compare: cases in
// alternating slices, calls/s, calls per CPU-second, p50 and p99) and what they measure against:
// a one-hop WebSocket echo that speaks the engine's frames, the payload every case sends, and
// the CPU time this process has used (for calls per CPU-second).
package benchbase

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/protocol"
)

// Payload is the ~90-byte JSON every bench case sends: the shape of a sandbox exec request.
var Payload = json.RawMessage(`{"sandbox_id":"0d6f8c1e-3a1b-4c55-9a4e-0d2f7a1b9c10","cmd":"echo","args":["hello"]}`)

// EchoFunction is the function id the echo client invokes and the benches register.
const EchoFunction = "bench::echo"

// callTimeout bounds one echo call.
const callTimeout = 30 * time.Second

// ServeEcho answers every invokefunction frame on ln with an invocationresult carrying its
// data, until ln is closed.
func ServeEcho(ln net.Listener) error {
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(protocol.MaxFrameBytes)
		var wmu sync.Mutex
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			go func() {
				m, err := protocol.Decode(b)
				if err != nil {
					return
				}
				out, _ := protocol.Encode(&protocol.Message{Type: protocol.TypeInvocationResult, InvocationID: m.InvocationID, FunctionID: m.FunctionID, Result: m.Data})
				wmu.Lock()
				_ = c.Write(context.Background(), websocket.MessageText, out)
				wmu.Unlock()
			}()
		}
	}))
}

// EchoClient sends invokefunction frames to a ServeEcho server and matches the replies by
// invocation id, as the SDK does.
type EchoClient struct {
	c       *websocket.Conn
	wmu     sync.Mutex
	next    atomic.Uint64
	mu      sync.Mutex
	pending map[string]chan struct{}
}

// DialEcho connects to the ServeEcho server at url (ws://host:port).
func DialEcho(url string) (*EchoClient, error) {
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(protocol.MaxFrameBytes)
	ec := &EchoClient{c: c, pending: map[string]chan struct{}{}}
	go ec.readReplies()
	return ec, nil
}

func (ec *EchoClient) readReplies() {
	for {
		_, b, err := ec.c.Read(context.Background())
		if err != nil {
			return
		}
		m, err := protocol.Decode(b)
		if err != nil {
			continue
		}
		ec.mu.Lock()
		ch := ec.pending[m.InvocationID]
		delete(ec.pending, m.InvocationID)
		ec.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	}
}

// Call sends Payload to EchoFunction and waits for the reply.
func (ec *EchoClient) Call() error {
	id := strconv.FormatUint(ec.next.Add(1), 36)
	ch := make(chan struct{})
	ec.mu.Lock()
	ec.pending[id] = ch
	ec.mu.Unlock()
	b, _ := protocol.Encode(&protocol.Message{Type: protocol.TypeInvokeFunction, InvocationID: id, FunctionID: EchoFunction, Data: Payload, TimeoutMS: int64(callTimeout / time.Millisecond)})
	ec.wmu.Lock()
	err := ec.c.Write(context.Background(), websocket.MessageText, b)
	ec.wmu.Unlock()
	if err != nil {
		return err
	}
	t := time.NewTimer(callTimeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return errors.New("echo baseline: no reply within " + callTimeout.String())
	}
}

// Close closes the connection.
func (ec *EchoClient) Close() error { return ec.c.CloseNow() }
