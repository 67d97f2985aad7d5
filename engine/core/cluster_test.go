package core

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
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
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
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
// request/reply with the same payload, at c = 1, 16 and 256 callers: calls/s and p50 latency of
// each, the ratios against their targets (a remote call's p50 at most 1.5x a local one's at
// c = 1, remote calls/s at c = 256 at least 60% of local), and where the time of a remote call
// goes at c = 1 (caller to handler, handler back to caller).
//
// It also prints the bound NATS itself sets, from the same run: a remote call does a local
// call's work (the same four WebSocket frames) plus a NATS request/reply's, on the same cores,
// so its latency is at least local + bare NATS and its calls/s at most 1/(1/local + 1/NATS).
// A target beyond that bound cannot be met on this machine by any change to the cluster's code.
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
	phases := func(call func() error) (out, back time.Duration) {
		for range b.N {
			t0 := time.Now()
			if err := call(); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			t1 := time.Unix(0, handled.Load())
			out, back = out+t1.Sub(t0), back+t3.Sub(t1)
		}
		return out / time.Duration(b.N), back / time.Duration(b.N)
	}
	engineCall := func(fn string) func() error {
		return func() error { _, err := cl.Call(context.Background(), fn, payload); return err }
	}
	natsCall := func() error {
		_, err := nreq.Request("bench.echo", payload, 10*time.Second)
		return err
	}
	paths := []struct {
		name string
		call func() error
	}{{"local", engineCall("local::echo")}, {"remote", engineCall("remote::echo")}, {"NATS", natsCall}}
	concs := []int{1, 16, 256}
	b.ResetTimer()
	var figs [3][3]loadFigures // by concurrency, then path
	for i, conc := range concs {
		for j, p := range paths {
			figs[i][j] = underLoad(b, conc, p.call)
		}
	}
	lout, lback := phases(paths[0].call)
	rout, rback := phases(paths[1].call)
	b.StopTimer()
	if b.N < 100 {
		return // the harness's first, one-call round: too few calls for figures
	}
	callCost, replyCost := cluster.CodecCost(cluster.Key{Namespace: "default", FunctionID: "remote::echo"}, payload, 2000)
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + "us" }
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	for i, conc := range concs {
		l, r, n := figs[i][0], figs[i][1], figs[i][2]
		b.Logf("c=%d: local %.0f calls/s p50 %s; remote %.0f calls/s p50 %s; bare NATS %.0f calls/s p50 %s; remote/local p50 %.2fx, calls/s %.0f%%",
			conc, l.rate, us(l.p50), r.rate, us(r.p50), n.rate, us(n.p50), float64(r.p50)/float64(l.p50), 100*r.rate/l.rate)
	}
	l1, r1, n1 := figs[0][0], figs[0][1], figs[0][2]
	lat, latBound := float64(r1.p50)/float64(l1.p50), float64(l1.p50+n1.p50)/float64(l1.p50)
	b.Logf("target c=1 remote/local p50 <= 1.50x: %.2fx, %s; NATS-only bound (local + bare NATS)/local %.2fx%s",
		lat, met(lat <= 1.5), latBound, beyond(latBound > 1.5))
	l256, r256, n256 := figs[2][0], figs[2][1], figs[2][2]
	thr, thrBound := r256.rate/l256.rate, n256.rate/(l256.rate+n256.rate)
	b.Logf("target c=256 remote/local calls/s >= 60%%: %.0f%%, %s; NATS-only bound NATS/(local + NATS) %.0f%%%s",
		100*thr, met(thr >= 0.6), 100*thrBound, beyond(thrBound < 0.6))
	b.Logf("c=1 caller -> handler: local %s, remote %s (+%s: NATS hop ~%s, cluster encode+sign+check+decode %s, the rest hand-offs between goroutines)",
		us(lout), us(rout), us(rout-lout), us(n1.p50/2), us(callCost))
	b.Logf("c=1 handler -> caller: local %s, remote %s (+%s: NATS hop ~%s, cluster encode+sign+check+decode %s, the rest hand-offs between goroutines)",
		us(lback), us(rback), us(rback-lback), us(n1.p50/2), us(replyCost))
	b.ReportMetric(float64(l1.p50.Nanoseconds()), "local-p50-ns")
	b.ReportMetric(float64(r1.p50.Nanoseconds()), "remote-p50-ns")
	b.ReportMetric(lat, "remote/local-p50")
	b.ReportMetric(latBound, "bound-p50")
	b.ReportMetric(thr, "remote/local-c256")
	b.ReportMetric(thrBound, "bound-c256")
}

// beyond is what the bench says after a NATS-only bound: whether the target lies past it.
func beyond(past bool) string {
	if past {
		return ": the target is beyond what NATS allows on this machine"
	}
	return ""
}

// loadFigures is what underLoad measures: calls/s and the median latency of a call.
type loadFigures struct {
	rate float64
	p50  time.Duration
}

// underLoad makes b.N calls with conc callers at once and measures them.
func underLoad(b *testing.B, conc int, call func() error) loadFigures {
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	var next atomic.Int64
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				t0 := time.Now()
				if err := call(); err != nil {
					b.Error(err)
					return
				}
				lat[i-1] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	rate := float64(b.N) / time.Since(start).Seconds()
	slices.Sort(lat)
	return loadFigures{rate: rate, p50: lat[len(lat)/2]}
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
