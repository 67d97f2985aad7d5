// Package enginetest is the kit for tests that need a running engine: Start serves one on a free
// loopback port for the length of a test, Worker connects an SDK worker to it, and Eventually
// waits for a condition with a deadline instead of sleeping.
//
// Start takes the engine rather than its options so that engine/core's own tests, which may not
// import a package that imports core, use the same kit: enginetest.Start(t, core.New(opts)).
//
// Only tests use it: it listens on 127.0.0.1 alone and adds no credential or function of its own.
package enginetest

import (
	"context"
	"github.com/iii-go/iii/internal/base/poll"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

// Tick is how long Poll waits between two looks at its condition.
const Tick = poll.Tick

// StartTimeout bounds how long Worker waits for the engine to accept a worker.
const StartTimeout = 10 * time.Second

// Engine is what Start serves; *core.Engine is one.
type Engine interface {
	Serve(ctx context.Context, ln net.Listener) error
}

// Server is an engine served for one test.
type Server struct {
	URL  string // ws://127.0.0.1:<port>, for protocol.Config.URL
	Addr string // 127.0.0.1:<port>
	stop func()
}

// Stop ends the engine and waits for its Serve to return. It runs at cleanup too; a second call
// does nothing.
func (s *Server) Stop() { s.stop() }

// Start serves e on a free loopback port until the test ends (or Stop).
func Start(tb testing.TB, e Engine) *Server {
	tb.Helper()
	ln, url := Listen(tb)
	stop := Go(tb, func(ctx context.Context) error { return e.Serve(ctx, ln) })
	return &Server{URL: url, Addr: ln.Addr().String(), stop: stop}
}

// Listen opens a listener on a free loopback port and returns it with its ws:// URL, for an
// engine served some other way than Start (several listeners, say). Go's serve closes it.
func Listen(tb testing.TB) (net.Listener, string) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln, "ws://" + ln.Addr().String()
}

// Go runs serve in a goroutine until the test ends. The returned stop, which also runs at
// cleanup, cancels serve's context and waits for serve to return; a second call does nothing.
// serve's error is dropped: at the end of a test it is only the cancellation.
func Go(tb testing.TB, serve func(ctx context.Context) error) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = serve(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)
	return stop
}

// Worker connects a worker named t-<ns> in namespace ns to the engine at url, serving fns, and
// closes it when the test ends.
func Worker(tb testing.TB, url, ns string, fns map[string]protocol.Handler) *protocol.Worker {
	tb.Helper()
	return Connect(tb, protocol.Config{URL: url, Namespace: ns, Name: "t-" + ns}, fns)
}

// Connect is Worker with the whole configuration given (a name, a token, no reconnection),
// registering each of fns with opts. It fails the test if the worker cannot register fns or
// connect within StartTimeout.
func Connect(tb testing.TB, cfg protocol.Config, fns map[string]protocol.Handler, opts ...protocol.FuncOption) *protocol.Worker {
	tb.Helper()
	w := protocol.NewWorker(cfg)
	for id, h := range fns {
		if err := w.Register(id, h, opts...); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = w.Close() })
	return w
}

// Eventually waits until cond holds, looking every Tick, and fails the test naming what if it
// does not within timeout.
func Eventually(tb testing.TB, what string, timeout time.Duration, cond func() bool) {
	tb.Helper()
	if !Poll(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Poll is Eventually for a caller that reports the failure itself (with the last state it saw,
// or outside a testing.TB): it reports whether cond held within timeout. cond is always tried
// at least once, and once more at the deadline.
func Poll(timeout time.Duration, cond func() bool) bool { return poll.Until(timeout, cond) }
