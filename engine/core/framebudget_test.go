package core

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// framesHeld is how many bytes of the engine's frame budget are held.
func framesHeld(e *Engine) int64 { return e.frames.inUse() }

// rawWS is a hand-driven client socket of the engine: the attacker of the frame-budget tests.
type rawWS struct {
	net.Conn
	br *bufio.Reader
}

// dialRaw opens a TCP connection to the engine and does the WebSocket handshake by hand.
func dialRaw(t *testing.T, url string) *rawWS {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(url, "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second)) // failure guard only
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	fmt.Fprintf(nc, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return &rawWS{Conn: nc, br: br}
}

// header is a masked frame header (FIN, opcode op) declaring n payload bytes, with the mask
// key 0 so that the payload goes as is.
func rawHeader(op byte, n uint64) []byte {
	b := []byte{0x80 | op, 0x80 | 127}
	b = binary.BigEndian.AppendUint64(b, n)
	return append(b, 0, 0, 0, 0)
}

// send writes one masked text frame carrying p.
func (r *rawWS) send(t *testing.T, p []byte) {
	t.Helper()
	if _, err := r.Write(append(rawHeader(1, uint64(len(p))), p...)); err != nil {
		t.Fatal(err)
	}
}

// next reads the next frame the engine sent: its opcode and payload (servers never mask).
func (r *rawWS) next() (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(r.br, l[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(r.br, l[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(l[:])
	}
	p := make([]byte, n)
	_, err := io.ReadFull(r.br, p)
	return h[0] & 0x0f, p, err
}

// until reads frames until one satisfies stop, returning it, or the close frame's status and
// reason as an error.
func (r *rawWS) until(stop func(p []byte) bool) ([]byte, error) {
	for {
		op, p, err := r.next()
		if err != nil {
			return nil, err
		}
		if op == 8 {
			if len(p) < 2 {
				return nil, errors.New("close without status")
			}
			return nil, fmt.Errorf("close %d %s", binary.BigEndian.Uint16(p), p[2:])
		}
		if stop(p) {
			return p, nil
		}
	}
}

func isResult(id string) func([]byte) bool {
	return func(p []byte) bool {
		var m protocol.Message
		return json.Unmarshal(p, &m) == nil && m.Type == protocol.TypeInvocationResult && m.InvocationID == id
	}
}

// registerRaw registers r as a worker named name, waiting for the engine's answer.
func (r *rawWS) register(t *testing.T, name string) {
	t.Helper()
	b, _ := json.Marshal(invoke("reg", protocol.FnRegisterWorker, map[string]string{"name": name}))
	r.send(t, b)
	if _, err := r.until(isResult("reg")); err != nil {
		t.Fatalf("%s: register: %v", name, err)
	}
}

// TestFrameBudgetNotStarvedByDeclaredLengths (review N1, row B13): K registered sockets each
// send a frame header declaring 64 MiB and one byte of it, then wait. Before, the engine
// reserved the declared length from its 256 MiB budget, so every other client was closed
// 1013 FRAME_BUDGET_EXCEEDED for as long as the four stayed. Now the budget is taken as bytes
// arrive: fresh clients, a worker that reconnects and a worker connected before all keep being
// served, and the attackers hold a few KiB each.
func TestFrameBudgetNotStarvedByDeclaredLengths(t *testing.T) {
	const k, clients, calls = 4, 40, 200
	e := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	url := enginetest.Start(t, e).URL
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"t::echo": func(_ context.Context, p json.RawMessage) (any, error) { return p, nil },
	})
	caller := enginetest.Worker(t, url, "default", nil)

	attackers := make([]*rawWS, k)
	for i := range attackers {
		a := dialRaw(t, url)
		a.register(t, fmt.Sprintf("holder-%d", i))
		if _, err := a.Write(append(rawHeader(1, 64<<20), 'x')); err != nil {
			t.Fatal(err)
		}
		attackers[i] = a
	}
	// Before, each header reserved 64 MiB; now each attacker holds its read buffer. Either
	// way the budget holds at least a buffer per attacker once all four are in.
	enginetest.Eventually(t, "the attackers' frames to be read", 20*time.Second, func() bool { return framesHeld(e) >= k*4096 })
	heldDuring := framesHeld(e)

	served, refused := 0, []string{}
	for i := range clients { // fresh connections, as `iii call` makes
		c := rawDial(t, url)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := rawSend(t, c, invoke("l", protocol.FnListWorkers, nil))
		var b []byte
		for err == nil {
			_, b, err = c.Read(ctx)
			if err == nil && isResult("l")(b) {
				break
			}
		}
		cancel()
		c.CloseNow()
		if err != nil {
			refused = append(refused, fmt.Sprintf("client %d: %v", i, err))
			continue
		}
		served++
	}
	echoed := 0
	for i := range calls { // through the worker connected before the attack
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := caller.Call(ctx, "t::echo", map[string]int{"i": i})
		cancel()
		if err != nil {
			refused = append(refused, fmt.Sprintf("call %d: %v", i, err))
			break
		}
		echoed++
	}
	reconnected := false // a worker that connects during the attack registers and serves
	nw := protocol.NewWorker(protocol.Config{URL: url, Name: "late"})
	_ = nw.Register("t::late", func(context.Context, json.RawMessage) (any, error) { return "ok", nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nw.Start(ctx); err == nil {
		defer nw.Close()
		if _, err := caller.Call(ctx, "t::late", nil); err == nil {
			reconnected = true
		} else {
			refused = append(refused, "the late worker: "+err.Error())
		}
	} else {
		refused = append(refused, "the late worker: "+err.Error())
	}
	t.Logf("during the attack (%d sockets declaring 64 MiB, 1 byte sent): %d of %d fresh clients served, %d of %d calls through a connected worker, late worker served: %v; frame budget held %d bytes",
		k, served, clients, echoed, calls, reconnected, heldDuring)
	if len(refused) > 0 {
		t.Fatalf("refused during the attack:\n%s", strings.Join(refused[:min(len(refused), 5)], "\n"))
	}
	if heldDuring > 1<<20 {
		t.Fatalf("the attackers hold %d bytes of the frame budget, want what arrived (a read buffer each)", heldDuring)
	}
}

// TestFrameBudgetEvictsLargest: when the budget is spent by frames that did arrive, the
// connection holding the most is closed with 1013 FRAME_BUDGET_EXCEEDED, not the small one
// asking; a connection past its share (a quarter) is closed itself.
func TestFrameBudgetEvictsLargest(t *testing.T) {
	const budget = 4 << 20
	e := New(Options{FrameBudget: budget, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	url := enginetest.Start(t, e).URL
	attackers := make([]*rawWS, 4)
	for i := range attackers {
		a := dialRaw(t, url)
		a.register(t, fmt.Sprintf("big-%d", i))
		// All but a byte of frames of 800, 850, 900 and 1000 KiB, under the share of 1 MiB:
		// 3550 KiB held, the last one holding the most.
		declared := []int{800, 850, 900, 1000}[i] << 10
		if _, err := a.Write(append(rawHeader(1, uint64(declared)), make([]byte, declared-1)...)); err != nil {
			t.Fatal(err)
		}
		attackers[i] = a
	}
	enginetest.Eventually(t, "the attackers' frames to arrive", 20*time.Second, func() bool { return framesHeld(e) >= 3550<<10 })
	w := enginetest.Worker(t, url, "default", nil)
	if _, err := w.Call(context.Background(), protocol.FnListWorkers, map[string]string{"pad": strings.Repeat("y", 700<<10)}); err != nil {
		t.Fatalf("the small connection asking for budget: %v", err)
	}
	// The one holding the most (the last) is closed; the others keep waiting for their frames.
	last := attackers[len(attackers)-1]
	if _, err := last.until(func([]byte) bool { return false }); err == nil || !strings.Contains(err.Error(), "close 1013 FRAME_BUDGET_EXCEEDED") {
		t.Fatalf("the connection holding the most: %v, want close 1013 FRAME_BUDGET_EXCEEDED", err)
	} else {
		t.Logf("the connection holding the most: %v", err)
	}
	if held := framesHeld(e); held > budget {
		t.Fatalf("%d bytes held, past the budget", held)
	}

	// Past its share: a frame of more than a quarter of the budget closes its own connection.
	a := dialRaw(t, url)
	a.register(t, "greedy")
	if _, err := a.Write(append(rawHeader(1, 2<<20), make([]byte, 2<<20)...)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.until(func([]byte) bool { return false }); err == nil || !strings.Contains(err.Error(), "close 1013 FRAME_BUDGET_EXCEEDED") || !strings.Contains(err.Error(), "share") {
		t.Fatalf("a frame past the share: %v, want close 1013 FRAME_BUDGET_EXCEEDED naming the share", err)
	}
}

// TestFrameTimeout: a registered connection whose message stops arriving mid-frame is closed
// with 1008 FRAME_TIMEOUT once the frame deadline passes; idle time between messages is not
// bounded.
func TestFrameTimeout(t *testing.T) {
	e := New(Options{FrameTimeout: 200 * time.Millisecond, FrameMinRate: 1 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	url := enginetest.Start(t, e).URL
	idle := dialRaw(t, url)
	idle.register(t, "idle")
	a := dialRaw(t, url)
	a.register(t, "slow")
	start := time.Now()
	if _, err := a.Write(append(rawHeader(1, 64<<20), 'x')); err != nil {
		t.Fatal(err)
	}
	_, err := a.until(func([]byte) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "close 1008 "+errcode.FrameTimeout) {
		t.Fatalf("got %v, want close 1008 %s", err, errcode.FrameTimeout)
	}
	t.Logf("%v after %s", err, time.Since(start).Round(time.Millisecond))
	b, _ := json.Marshal(invoke("l", protocol.FnListWorkers, nil))
	idle.send(t, b) // idle past the frame timeout, then a message: served
	if _, err := idle.until(isResult("l")); err != nil {
		t.Fatalf("the idle connection: %v", err)
	}
	enginetest.Eventually(t, "the budget to be given back", 20*time.Second, func() bool { return framesHeld(e) <= 4096 })
}

// TestBinaryFrameNotUTF8Ignored: a binary frame of JSON with bytes that are not UTF-8 is
// ignored, not forwarded in a text frame that its receiver would have to fail with 1007.
func TestBinaryFrameNotUTF8Ignored(t *testing.T) {
	url := enginetest.Start(t, New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})).URL
	a := dialRaw(t, url)
	a.register(t, "bin")
	bad := []byte(`{"type":"invokefunction","invocation_id":"b","function_id":"engine::workers::list","data":{"x":"` + "\xff" + `"}}`)
	if _, err := a.Write(append(rawHeader(2, uint64(len(bad))), bad...)); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(invoke("l", protocol.FnListWorkers, nil))
	a.send(t, b)
	p, err := a.until(func(p []byte) bool { return isResult("b")(p) || isResult("l")(p) })
	if err != nil || !isResult("l")(p) {
		t.Fatalf("got %s, %v; want the invalid frame ignored and the next one answered", p, err)
	}
}
