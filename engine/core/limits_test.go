package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

func rawSend(t *testing.T, c *websocket.Conn, m map[string]any) error {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Write(ctx, websocket.MessageText, b)
}

func rawDial(t testing.TB, url string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(protocol.MaxFrameBytes)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func invoke(id, fn string, data any) map[string]any {
	return map[string]any{"type": protocol.TypeInvokeFunction, "invocation_id": id, "function_id": fn, "data": data}
}

// nextResult reads c until an invocationresult frame comes and returns it, decoded and raw.
func nextResult(t *testing.T, ctx context.Context, c *websocket.Conn) (protocol.Message, []byte) {
	t.Helper()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m protocol.Message
		_ = json.Unmarshal(b, &m)
		if m.Type == protocol.TypeInvocationResult {
			return m, b
		}
	}
}

func connCount(e *Engine) int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return len(e.conns)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestSlowReaderIsDropped: a client that sends calls and never reads their replies is closed
// as SLOW_CONSUMER once its outbound queue is full; the engine's goroutines and heap stay
// bounded and other clients are served meanwhile.
func TestSlowReaderIsDropped(t *testing.T) {
	e := New(Options{QueueBytes: 1 << 20})
	url := enginetest.Start(t, e).URL
	other := enginetest.Worker(t, url, "default", nil)
	g0, h0 := runtime.NumGoroutine(), heapInUse()
	c := rawDial(t, url)
	sent := 0
	for ; sent < 100000; sent++ {
		if rawSend(t, c, invoke(strconv.Itoa(sent), protocol.FnListFunctions, map[string]any{})) != nil {
			break // the engine closed the connection
		}
	}
	enginetest.Eventually(t, "the engine to drop the never-reading client", 20*time.Second, func() bool { return connCount(e) == 1 })
	if _, err := other.Call(context.Background(), protocol.FnListWorkers, nil); err != nil {
		t.Fatalf("another client's call: %v", err)
	}
	if sent == 100000 {
		t.Fatal("100000 invocations sent and the engine never closed the never-reading client")
	}
	// The engine-served calls already running for the dropped client (at most MaxInflight) end
	// on their own once their replies have nowhere to go; wait for that instead of sampling
	// the count at once, which raced with them.
	enginetest.Eventually(t, "the dropped client's calls to end", 20*time.Second, func() bool { return runtime.NumGoroutine() <= g0+20 })
	g1, h1 := runtime.NumGoroutine(), heapInUse()
	t.Logf("slow reader: %d invocations sent before the engine closed it; goroutines %d -> %d, heap in use %.1f -> %.1f MiB",
		sent, g0, g1, float64(h0)/(1<<20), float64(h1)/(1<<20))
}

// TestStuckWorkerDoesNotBlockCallers: a worker that stops reading does not block the read loop
// of a client that calls it: the client's other calls are answered, and every call to the stuck
// worker gets an answer (timeout; invocation_stopped once the engine drops the worker as
// SLOW_CONSUMER; function_not_found after that).
func TestStuckWorkerDoesNotBlockCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: moves bulk frames, too slow for the race pass; the plain run covers it")
	}
	url := enginetest.Start(t, New(Options{})).URL
	ctx := context.Background()
	w := rawDial(t, url)
	if err := rawSend(t, w, map[string]any{"type": "registerfunction", "id": "hol::fn"}); err != nil {
		t.Fatal(err)
	}
	if err := rawSend(t, w, invoke("r", protocol.FnRegisterWorker, map[string]any{"name": "stuck"})); err != nil {
		t.Fatal(err)
	}
	for { // read up to the registration's reply, then never again
		_, b, err := w.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"invocationresult"`) {
			break
		}
	}
	c := rawDial(t, url)
	pad := strings.Repeat("a", 64<<10)
	const n = 400
	go func() {
		for i := range n {
			m := invoke(strconv.Itoa(i), "hol::fn", pad)
			m["timeout_ms"] = 500
			if rawSend(t, c, m) != nil {
				return
			}
		}
		_ = rawSend(t, c, invoke("list", protocol.FnListWorkers, map[string]any{}))
	}()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second) // failure guard only
	defer cancel()
	got := map[string]int{}
	answered := 0
	for answered < n+1 {
		_, b, err := c.Read(rctx)
		if err != nil {
			t.Fatalf("after %d answers (%v): %v", answered, got, err)
		}
		var m protocol.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Type != protocol.TypeInvocationResult {
			continue
		}
		answered++
		switch {
		case m.InvocationID == "list":
			got["list"]++
		case m.Error != nil:
			got[m.Error.Code]++
		default:
			got["result"]++
		}
	}
	t.Logf("answers: %v", got)
	if got["list"] != 1 || got[errcode.Timeout]+got[errcode.InvocationStopped]+got[errcode.FunctionNotFound] != n {
		t.Fatalf("answers %v", got)
	}
}

// TestCallsForgottenWhenCallerLeaves: calls a worker never answers are dropped from the engine
// once their caller disconnects.
func TestCallsForgottenWhenCallerLeaves(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	block := make(chan struct{})
	defer close(block)
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{"flood::never": func(ctx context.Context, _ json.RawMessage) (any, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil, nil
	}})
	c := rawDial(t, url)
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	const n = 2000
	for i := range n {
		if err := rawSend(t, c, invoke(strconv.Itoa(i), "flood::never", nil)); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, fmt.Sprintf("%d pending calls", n), 20*time.Second, func() bool { return e.PendingCount() == n })
	c.Close(websocket.StatusNormalClosure, "")
	enginetest.Eventually(t, "the pending calls of the departed caller to be dropped", 20*time.Second, func() bool { return e.PendingCount() == 0 })
}

// TestDefaultMaxCallTimeout: a call that names no timeout gets one, Options.MaxCallTimeout; a
// longer timeout_ms is cut to it.
func TestDefaultMaxCallTimeout(t *testing.T) {
	url := enginetest.Start(t, New(Options{MaxCallTimeout: 100 * time.Millisecond})).URL
	block := make(chan struct{})
	defer close(block)
	never := func(ctx context.Context, _ json.RawMessage) (any, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil, nil
	}
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{"slow::never": never})
	c := rawDial(t, url)
	for i, m := range []map[string]any{invoke("a", "slow::never", nil), invoke("b", "slow::never", nil)} {
		if i == 1 {
			m["timeout_ms"] = 3600000
		}
		if err := rawSend(t, c, m); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failure guard only
	defer cancel()
	for range 2 {
		m, b := nextResult(t, ctx, c)
		if m.Error == nil || m.Error.Code != errcode.Timeout {
			t.Fatalf("call %s: %s", m.InvocationID, b)
		}
	}
}

// TestRegistrationDeadline: a connection that never registers is closed with
// REGISTRATION_TIMEOUT; a registered worker stays.
func TestRegistrationDeadline(t *testing.T) {
	e := New(Options{RegisterTimeout: 100 * time.Millisecond})
	url := enginetest.Start(t, e).URL
	w := enginetest.Worker(t, url, "default", nil)
	c := rawDial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failure guard only
	defer cancel()
	var err error
	for err == nil {
		_, _, err = c.Read(ctx)
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.HasPrefix(ce.Reason, errcode.RegistrationTimeout) {
		t.Fatalf("got %v, want a 1008 close with %s", err, errcode.RegistrationTimeout)
	}
	if _, err := w.Call(context.Background(), protocol.FnListWorkers, nil); err != nil {
		t.Fatalf("the registered worker: %v", err)
	}
	enginetest.Eventually(t, "one connection left", 20*time.Second, func() bool { return connCount(e) == 1 })
}

// TestFrameBudget: a frame that would take a connection past its share of the budget for
// frames being read (a quarter) closes its connection with 1013 FRAME_BUDGET_EXCEEDED, and
// gives the budget back.
func TestFrameBudget(t *testing.T) {
	e := New(Options{FrameBudget: 4 << 20})
	url := enginetest.Start(t, e).URL
	c := rawDial(t, url)
	big := invoke("big", protocol.FnListWorkers, strings.Repeat("x", 8<<20))
	_ = rawSend(t, c, big)                                                   // the engine may close before the whole frame is written
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failure guard only
	defer cancel()
	var err error
	for err == nil {
		_, _, err = c.Read(ctx)
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusTryAgainLater || !strings.HasPrefix(ce.Reason, errcode.FrameBudgetExceeded) {
		t.Fatalf("got %v, want a 1013 close with %s", err, errcode.FrameBudgetExceeded)
	}
	enginetest.Eventually(t, "the budget to be given back", 20*time.Second, func() bool { return e.frames.inUse() == 0 })
	w := enginetest.Worker(t, url, "default", nil)
	if _, err := w.Call(context.Background(), protocol.FnListWorkers, map[string]string{"pad": strings.Repeat("y", 900<<10)}); err != nil {
		t.Fatalf("a frame within the budget: %v", err)
	}
}

// TestInflightCap: one connection may run at most Options.MaxInflight engine-served calls; the
// built-ins served inline do not count.
func TestInflightCap(t *testing.T) {
	e := New(Options{MaxInflight: 2})
	url := enginetest.Start(t, e).URL
	release := make(chan struct{})
	defer close(release)
	e.Handle("test::block", "blocks", func(ctx context.Context, _ Caller, _ json.RawMessage) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "done", nil
	})
	c := rawDial(t, url)
	for i := range 3 {
		if err := rawSend(t, c, invoke(strconv.Itoa(i), "test::block", nil)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failure guard only
	defer cancel()
	if m, b := nextResult(t, ctx, c); m.InvocationID != "2" || m.Error == nil || m.Error.Code != errcode.TooManyCalls {
		t.Fatalf("got %s, want call 2 refused %s", b, errcode.TooManyCalls)
	}
	// A built-in served inline (HandleInline) runs on the read loop and is not counted: it is
	// answered while the cap is full.
	if err := rawSend(t, c, invoke("list", protocol.FnListFunctions, map[string]any{})); err != nil {
		t.Fatal(err)
	}
	if m, b := nextResult(t, ctx, c); m.InvocationID != "list" || m.Error != nil {
		t.Fatalf("got %s, want the answer to engine::functions::list", b)
	}
}

// TestEnqueueWithoutQueue: action enqueue is answered enqueue_error while no queue serves it; the
// function does not run as a plain call.
func TestEnqueueWithoutQueue(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	ran := make(chan struct{}, 1)
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{"payments::charge": func(context.Context, json.RawMessage) (any, error) {
		ran <- struct{}{}
		return "charged", nil
	}})
	c := rawDial(t, url)
	m := invoke("q", "payments::charge", map[string]any{})
	m["action"] = map[string]any{"type": "enqueue", "queue": "payment"}
	if err := rawSend(t, c, m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failure guard only
	defer cancel()
	if r, b := nextResult(t, ctx, c); r.Error == nil || r.Error.Code != errcode.EnqueueError || !strings.Contains(r.Error.Message, "'payment'") {
		t.Fatalf("got %s", b)
	}
	select {
	case <-ran:
		t.Fatal("the enqueued function ran as a plain call")
	default:
	}
}

// syncBuffer is a log sink tests read while the engine writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWriteDeadlineDropsStuckWorker: with queue limits too large to trip, a worker that stops
// reading is still closed as SLOW_CONSUMER once a socket write (a batch of frames) misses the
// write deadline.
func TestWriteDeadlineDropsStuckWorker(t *testing.T) {
	var log syncBuffer
	e := New(Options{WriteTimeout: 200 * time.Millisecond, QueueBytes: 1 << 30, QueueFrames: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	url := enginetest.Start(t, e).URL
	ctx := context.Background()
	w := rawDial(t, url)
	if err := rawSend(t, w, map[string]any{"type": "registerfunction", "id": "hol::fn"}); err != nil {
		t.Fatal(err)
	}
	if err := rawSend(t, w, invoke("r", protocol.FnRegisterWorker, map[string]any{"name": "stuck"})); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := w.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"invocationresult"`) {
			break
		}
	}
	c := rawDial(t, url)
	go func() {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	}()
	enginetest.Eventually(t, "the caller's connection", 20*time.Second, func() bool { return connCount(e) == 2 })
	pad := strings.Repeat("a", 64<<10)
	go func() {
		for i := range 2000 {
			if connCount(e) < 2 || rawSend(t, c, invoke(strconv.Itoa(i), "hol::fn", pad)) != nil {
				return
			}
		}
	}()
	enginetest.Eventually(t, "the engine to drop the worker that does not read", 20*time.Second, func() bool { return connCount(e) == 1 })
	enginetest.Eventually(t, "the SLOW_CONSUMER log line", 20*time.Second, func() bool {
		s := log.String()
		return strings.Contains(s, errcode.SlowConsumer) && strings.Contains(s, "write deadline")
	})
}

// TestFragmentedFramesAndPing: the worker connection joins a message sent in fragments (as
// Node's ws may send a large one), answers a WebSocket ping, and closes with 1009 a message
// over protocol.MaxFrameBytes.
func TestFragmentedFramesAndPing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: moves bulk frames, too slow for the race pass; the plain run covers it")
	}
	url := enginetest.Start(t, New(Options{})).URL
	c := rawDial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failure guard only
	defer cancel()
	read := make(chan []byte, 16)
	readErr := make(chan error, 1)
	go func() {
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				readErr <- err
				return
			}
			read <- b
		}
	}()
	b, _ := json.Marshal(invoke("frag", protocol.FnListWorkers, map[string]string{"pad": strings.Repeat("p", 20000)}))
	w, err := c.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	for len(b) > 0 { // each Write leaves as one fragment
		n := min(len(b), 7000)
		if _, err := w.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for answered := false; !answered; {
		select {
		case b := <-read:
			var m protocol.Message
			_ = json.Unmarshal(b, &m)
			answered = m.Type == protocol.TypeInvocationResult && m.InvocationID == "frag" && m.Error == nil
		case err := <-readErr:
			t.Fatalf("no answer to the fragmented call: %v", err)
		}
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	w, err = c.Writer(ctx, websocket.MessageBinary)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range protocol.MaxFrameBytes>>20 + 1 {
		if _, err := w.Write(chunk); err != nil {
			break // the engine closed: it stopped reading
		}
	}
	err = <-readErr
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("got %v, want a 1009 close", err)
	}
}
