package enginetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

// A worker started on a served engine is called by another, and after Stop the port is closed.
func TestStartWorkerStop(t *testing.T) {
	srv := enginetest.Start(t, core.New(core.Options{}))
	if !strings.HasPrefix(srv.URL, "ws://127.0.0.1:") || srv.URL != "ws://"+srv.Addr {
		t.Fatalf("url %q, addr %q", srv.URL, srv.Addr)
	}
	enginetest.Worker(t, srv.URL, "math", map[string]protocol.Handler{
		"math::twice": func(_ context.Context, in json.RawMessage) (any, error) {
			var n int
			_ = json.Unmarshal(in, &n)
			return 2 * n, nil
		},
	})
	cl := enginetest.Connect(t, protocol.Config{URL: srv.URL, Name: "caller"}, nil)
	out, err := cl.Call(context.Background(), "math::twice", 21, protocol.InNamespace("math"))
	if err != nil || string(out) != "42" {
		t.Fatalf("got %s, %v", out, err)
	}
	srv.Stop()
	srv.Stop() // a second call does nothing
	if c, err := net.DialTimeout("tcp", srv.Addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after Stop", srv.Addr)
	}
}

func TestPoll(t *testing.T) {
	n := 0
	if !enginetest.Poll(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Poll stopped after %d looks", n)
	}
	n = 0
	start := time.Now()
	if enginetest.Poll(50*time.Millisecond, func() bool { n++; return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond || n < 2 {
		t.Fatalf("Poll gave up after %v and %d looks", waited, n)
	}
}

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper()                        {}
func (f *fatalTB) Fatalf(format string, a ...any) { f.msg = fmt.Sprintf(format, a...) }

func TestEventuallyNamesWhatItWaitedFor(t *testing.T) {
	tb := &fatalTB{TB: t}
	enginetest.Eventually(tb, "the moon", 20*time.Millisecond, func() bool { return false })
	if want := "timed out after 20ms waiting for the moon"; tb.msg != want {
		t.Fatalf("message %q, want %q", tb.msg, want)
	}
	tb.msg = ""
	enginetest.Eventually(tb, "the sun", time.Second, func() bool { return true })
	if tb.msg != "" {
		t.Fatalf("failed on a condition that held: %q", tb.msg)
	}
}
