package core

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-go/iii/engine/cluster"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
)

// natsURL runs an embedded NATS server on a free loopback port until the test ends.
func natsURL(tb testing.TB) string {
	tb.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats-server did not start")
	}
	tb.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// testClusterKey is the cluster key the test engines share.
var testClusterKey = []byte("0123456789abcdef0123456789abcdef")

// clusterEngine serves an engine that joined the NATS cluster at url.
func clusterEngine(tb testing.TB, url, name string) string {
	tb.Helper()
	ln, wsURL := enginetest.Listen(tb)
	e := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := e.JoinCluster(cluster.Options{URL: url, Name: name, Insecure: true, Key: testClusterKey}); err != nil {
		tb.Fatal(err)
	}
	if err := e.ServeClusterChannels(AdvertiseURL(ln.Addr().String())); err != nil {
		tb.Fatal(err)
	}
	enginetest.Go(tb, func(ctx context.Context) error { return e.Serve(ctx, ln) })
	return wsURL
}

// waitRemote calls fn through w until another engine serves it.
func waitRemote(tb testing.TB, w *protocol.Worker, fn string, payload any) json.RawMessage {
	tb.Helper()
	var out json.RawMessage
	var err error
	// Until the serving engine's subscription arrives the call is not found; any other error ends the wait.
	enginetest.Poll(10*time.Second, func() bool {
		out, err = w.Call(context.Background(), fn, payload)
		return err == nil || code(err) != errcode.FunctionNotFound
	})
	if err != nil {
		tb.Fatalf("%s: %v", fn, err)
	}
	return out
}

// waitClusterListed calls fn through w until its answer holds every one of want.
func waitClusterListed(t *testing.T, w *protocol.Worker, fn string, payload any, want ...string) {
	t.Helper()
	var out json.RawMessage
	// The other engine's announcement is on its way.
	listsAll := func() bool {
		var err error
		if out, err = w.Call(context.Background(), fn, payload); err != nil {
			t.Fatal(err)
		}
		for _, s := range want {
			if !strings.Contains(string(out), s) {
				return false
			}
		}
		return true
	}
	if !enginetest.Poll(10*time.Second, listsAll) {
		t.Fatalf("%s does not list %q: %s", fn, want, out)
	}
}

// A call of a function that only another engine's worker serves goes there over NATS and comes
// back with the same result, error codes and timeouts as a local call; protected functions stay
// local; a function no engine serves is function_not_found.
func TestClusterCallsReachAnotherEngine(t *testing.T) {
	t.Setenv(protocol.EnvTokenFile, "")
	t.Setenv(protocol.EnvToken, "")
	url := natsURL(t)
	a, c := clusterEngine(t, url, "a"), clusterEngine(t, url, "c")
	release := make(chan struct{})
	defer close(release)
	enginetest.Worker(t, c, "default", map[string]protocol.Handler{
		"calc::add": func(_ context.Context, in json.RawMessage) (any, error) {
			var p struct{ A, B int }
			_ = json.Unmarshal(in, &p)
			return map[string]int{"sum": p.A + p.B}, nil
		},
		"calc::fail": func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("no such sum") },
		"calc::slow": func(ctx context.Context, _ json.RawMessage) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
		"calc::nothing": func(context.Context, json.RawMessage) (any, error) { return nil, nil },
	})
	cl := enginetest.Worker(t, a, "default", nil)
	if out := waitRemote(t, cl, "calc::add", map[string]int{"a": 2, "b": 40}); string(out) != `{"sum":42}` {
		t.Fatalf("remote result %s", out)
	}
	ctx := context.Background()
	_, err := cl.Call(ctx, "calc::fail", nil)
	if code(err) != errcode.InvocationFailed || !strings.Contains(err.Error(), "no such sum") {
		t.Fatalf("remote error: %v", err)
	}
	_, err = cl.Call(ctx, "calc::slow", nil, protocol.WithTimeout(300*time.Millisecond))
	if c := code(err); c != errcode.Timeout && c != errcode.ClientTimeout {
		t.Fatalf("remote timeout: %v", err)
	}
	if out, err := cl.Call(ctx, "calc::nothing", nil); err != nil || string(out) != "null" {
		t.Fatalf("remote nothing: %s %v", out, err)
	}
	waitClusterListed(t, cl, protocol.FnListFunctions, map[string]string{"namespace": "default"}, `"function_id":"calc::add","namespace":"default","worker_id"`, `"engine":"c"`)
	waitClusterListed(t, cl, protocol.FnListWorkers, map[string]string{"search": "t-default"}, `"calc::add"`, `"engine":"c"`)
	_, err = cl.Call(ctx, "calc::none", nil)
	if code(err) != errcode.FunctionNotFound || !strings.Contains(err.Error(), "not found in namespace default") {
		t.Fatalf("no engine serves it: %v", err)
	}
}

// An end of a stream channel that connects to another engine of the cluster than the one holding
// the channel is relayed there: frames pass with their opcodes, a wrong key is refused as on the
// holding engine, and a channel no engine holds is not found.
func TestClusterChannelEndOnAnotherEngine(t *testing.T) {
	t.Setenv(protocol.EnvTokenFile, "")
	t.Setenv(protocol.EnvToken, "")
	url := natsURL(t)
	a, c := clusterEngine(t, url, "a"), clusterEngine(t, url, "c")
	w := enginetest.Worker(t, a, "default", nil)
	p := channelPair(t, w, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wr := rawWriter(t, a, p.Writer)
	sent := []struct {
		typ websocket.MessageType
		b   string
	}{{websocket.MessageText, `{"progress":1}`}, {websocket.MessageBinary, "abc"}}
	for _, f := range sent {
		if err := wr.Write(ctx, f.typ, []byte(f.b)); err != nil {
			t.Fatal(err)
		}
	}
	wr.Close(websocket.StatusNormalClosure, "")

	bad := p.Reader
	bad.AccessKey = "nope"
	u, _ := protocol.ChannelURL(c, bad)
	if _, resp, err := websocket.Dial(ctx, u, nil); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a wrong key through engine c: %v", err)
	}
	u, _ = protocol.ChannelURL(c, p.Reader)
	rd, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.CloseNow()
	for i, want := range sent {
		typ, b, err := rd.Read(ctx)
		if err != nil || typ != want.typ || string(b) != want.b {
			t.Fatalf("frame %d through engine c: %v %q %v", i, typ, b, err)
		}
	}
	if _, _, err := rd.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("the end of the channel through engine c: %v", err)
	}
	gone := p.Reader
	gone.ChannelID = strings.Repeat("0", 64)
	u, _ = protocol.ChannelURL(c, gone)
	if _, resp, err := websocket.Dial(ctx, u, nil); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a channel no engine holds: %v", err)
	}
}

// Only an engine of the cluster may connect a channel's end on another's behalf: a client that
// says it is one (the hop header) is refused even with the right key, and so is a made-up proof
// of the key; the same end then connects with its key as a client.
func TestClusterChannelHopNeedsAnEngine(t *testing.T) {
	t.Setenv(protocol.EnvTokenFile, "")
	t.Setenv(protocol.EnvToken, "")
	a := clusterEngine(t, natsURL(t), "a")
	p := channelPair(t, enginetest.Worker(t, a, "default", nil), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, _ := protocol.ChannelURL(a, p.Reader)
	nonce := strings.Repeat("ab", 16)
	forged := a + "/ws/channels/" + p.Reader.ChannelID + "?" + hopProofParam + "=" + cluster.HopProof(p.Reader.AccessKey, p.Reader.ChannelID, nonce)
	for what, try := range map[string]struct {
		url string
		h   http.Header
	}{
		"the right key with a hop header": {u, http.Header{hopHeader: {"evil"}}},
		"a proof on an unsigned hop":      {forged, http.Header{hopHeader: {"evil"}, "Iii-Auth": {"1 " + nonce + " AAAA evil"}}},
	} {
		if _, resp, err := websocket.Dial(ctx, try.url, &websocket.DialOptions{HTTPHeader: try.h}); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: %v", what, err)
		}
	}
	rd, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatalf("the reader with its key: %v", err)
	}
	rd.CloseNow()
}

// BenchmarkClusterCall compares, in one run, a call served by a worker of the same engine (the
// baseline) with one served by a worker of another engine over NATS, and a bare NATS
// request/reply with the same payload: latency at c = 1 with where the time goes (caller to
// handler, handler back to caller), and calls/s at c = 16 and c = 256. It logs the ratios
// against their targets: a remote call at most 1.5x a local one at c = 1, remote calls/s at
// c = 256 at least 60% of local.
func BenchmarkClusterCall(b *testing.B) {
	b.Setenv(protocol.EnvTokenFile, "")
	b.Setenv(protocol.EnvToken, "")
	url := natsURL(b)
	a, c := clusterEngine(b, url, "a"), clusterEngine(b, url, "c")
	var handled atomic.Int64 // when the handler last ran, for the phases at c = 1
	echo := func(_ context.Context, in json.RawMessage) (any, error) {
		handled.Store(time.Now().UnixNano())
		return in, nil
	}
	enginetest.Worker(b, a, "default", map[string]protocol.Handler{"local::echo": echo})
	enginetest.Worker(b, c, "default", map[string]protocol.Handler{"remote::echo": echo})
	cl := enginetest.Worker(b, a, "default", nil)
	waitRemote(b, cl, "remote::echo", nil)
	payload := json.RawMessage(`{"sandbox_id":"0d6f8c1e","cmd":"echo","args":["hello"]}`)
	nreq := natsEcho(b, url)

	// phases times n calls one after the other: mean caller-to-handler and handler-to-caller.
	phases := func(call func() error) (total, out, back time.Duration) {
		for range b.N {
			t0 := time.Now()
			if err := call(); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			t1 := time.Unix(0, handled.Load())
			total, out, back = total+t3.Sub(t0), out+t1.Sub(t0), back+t3.Sub(t1)
		}
		n := time.Duration(b.N)
		return total / n, out / n, back / n
	}
	// rate is calls/s of b.N calls made by conc callers at once.
	rate := func(conc int, call func() error) float64 {
		var wg sync.WaitGroup
		var next atomic.Int64
		start := time.Now()
		for range conc {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if err := call(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(b.N) / time.Since(start).Seconds()
	}
	engineCall := func(fn string) func() error {
		return func() error { _, err := cl.Call(context.Background(), fn, payload); return err }
	}
	natsCall := func() error {
		_, err := nreq.Request("bench.echo", payload, 10*time.Second)
		return err
	}
	b.ResetTimer()
	local, lout, lback := phases(engineCall("local::echo"))
	remote, rout, rback := phases(engineCall("remote::echo"))
	bare, _, _ := phases(natsCall)
	rates := map[string][3]float64{}
	for _, conc := range []int{16, 256} {
		rates[strconv.Itoa(conc)] = [3]float64{rate(conc, engineCall("local::echo")), rate(conc, engineCall("remote::echo")), rate(conc, natsCall)}
	}
	b.StopTimer()
	if b.N < 100 {
		return // the harness's first, one-call round: too few calls for figures
	}
	callCost, replyCost := cluster.CodecCost(cluster.Key{Namespace: "default", FunctionID: "remote::echo"}, payload, 2000)
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + "us" }
	b.Logf("c=1 latency: local %s, remote %s, bare NATS request/reply %s; remote/local %.2fx (target <= 1.50x)",
		us(local), us(remote), us(bare), float64(remote)/float64(local))
	b.Logf("  caller -> handler: local %s, remote %s (+%s: NATS hop ~%s, cluster encode+sign+check+decode %s, the rest hand-offs between goroutines)",
		us(lout), us(rout), us(rout-lout), us(bare/2), us(callCost))
	b.Logf("  handler -> caller: local %s, remote %s (+%s: NATS hop ~%s, cluster encode+sign+check+decode %s, the rest hand-offs between goroutines)",
		us(lback), us(rback), us(rback-lback), us(bare/2), us(replyCost))
	for _, conc := range []int{16, 256} {
		r := rates[strconv.Itoa(conc)]
		target := ""
		if conc == 256 {
			target = " (target >= 60%)"
		}
		b.Logf("c=%d calls/s: local %.0f, remote %.0f, bare NATS %.0f; remote/local %.0f%%%s", conc, r[0], r[1], r[2], 100*r[1]/r[0], target)
	}
	b.ReportMetric(float64(local.Nanoseconds()), "local-ns/call")
	b.ReportMetric(float64(remote.Nanoseconds()), "remote-ns/call")
	b.ReportMetric(float64(remote)/float64(local), "remote/local")
	b.ReportMetric(rates["256"][1]/rates["256"][0], "remote/local-c256")
}

// natsEcho connects a NATS client that answers every request on bench.echo with its payload
// and one that asks: the bare NATS request/reply a remote call is compared with.
func natsEcho(tb testing.TB, url string) *nats.Conn {
	tb.Helper()
	rep, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rep.Close)
	if _, err := rep.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		tb.Fatal(err)
	}
	if err := rep.Flush(); err != nil {
		tb.Fatal(err)
	}
	req, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(req.Close)
	return req
}
