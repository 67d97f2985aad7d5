package httpworker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

// slowServer serves under cfg GET /text, a POST route, and GET /block, whose function
// returns once release is closed (running counts its calls under way); active counts the
// connections in the middle of a request.
func slowServer(t *testing.T, cfg Config) (ts *httptest.Server, active, running *atomic.Int64, release chan struct{}) {
	t.Helper()
	release = make(chan struct{})
	running = &atomic.Int64{}
	call := func(ctx context.Context, _ protocol.Trigger, fn string, _ any, _ time.Duration) (json.RawMessage, error) {
		if fn == "api::block" {
			running.Add(1)
			defer running.Add(-1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return json.RawMessage(`{"body":"plain"}`), nil
	}
	s := New(cfg, call, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for id, c := range map[string]string{"text": `{"api_path":"/text"}`, "post": `{"api_path":"/users/:id/orders/:o","http_method":"POST"}`, "block": `{"api_path":"/block"}`} {
		fn := "api::text"
		if id == "block" {
			fn = "api::block"
		}
		if err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: id, FunctionID: fn, Config: json.RawMessage(c)}); err != nil {
			t.Fatal(err)
		}
	}
	active = &atomic.Int64{}
	ts = httptest.NewUnstartedServer(s)
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateActive {
			active.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return ts, active, running, release
}

// fromAddr is an HTTP client whose connections leave from the loopback address ip.
func fromAddr(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
	return &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// needLoopbackAliases skips where 127.0.0.2 and its neighbours are not loopback addresses
// (only Linux routes all of 127.0.0.0/8 to lo by default).
func needLoopbackAliases(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("clients from several loopback addresses (127.0.0.2, ...) need Linux, this is %s", runtime.GOOS)
	}
}

// slowBody opens a connection from ip, sends the headers of a POST with a 1000-byte body and
// then one body byte every tick until stop is closed.
func slowBody(t *testing.T, addr, ip string, tick time.Duration, stop <-chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("slow client from %s: %v", ip, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.Close()
		if _, err := io.WriteString(c, "POST /users/1/orders/2 HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n"); err != nil {
			return
		}
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
}

// Slow request bodies (N3): 24 connections trickle one body byte every 200 ms into a worker with
// 16 slots (and 4 per client): requests from the same address, and from another one, still get
// 200 throughout.
func TestSlowBodiesDoNotTakeTheSlots(t *testing.T) {
	needLoopbackAliases(t)
	cfg := Defaults()
	cfg.ConcurrencyRequestLimit = 16
	ts, active, _, _ := slowServer(t, cfg)
	addr := ts.Listener.Addr().String()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const slow = 24
	for i := range slow {
		slowBody(t, addr, fmt.Sprintf("127.0.0.%d", 1+i%2), 200*time.Millisecond, stop, &wg)
	}
	defer func() { close(stop); wg.Wait() }()
	enginetest.Eventually(t, "the slow requests to be read", 10*time.Second, func() bool { return active.Load() >= slow })
	const normal = 10
	for _, ip := range []string{"127.0.0.1", "127.0.0.3"} {
		ok, other := getMany(fromAddr(ip), ts.URL+"/text", normal)
		t.Logf("with %d slow bodies from 127.0.0.1 and .2 holding connections: %d of %d requests from %s got 200, others %v", slow, ok, normal, ip, other)
		if ok != normal {
			t.Errorf("only %d of %d requests from %s got 200 while %d slow bodies trickled (others: %v)", ok, normal, ip, slow, other)
		}
	}
}

// getMany sends n GETs of url one after the other: how many got 200, and the other statuses
// (-1: no answer).
func getMany(cl *http.Client, url string, n int) (ok int, other map[int]int) {
	other = map[int]int{}
	for range n {
		res, err := cl.Get(url)
		if err != nil {
			other[-1]++
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			ok++
		} else {
			other[res.StatusCode]++
		}
	}
	return ok, other
}

// A body that does not arrive within body_read_timeout gets 408 BODY_TIMEOUT.
func TestBodyReadTimeout(t *testing.T) {
	cfg := Defaults()
	cfg.BodyReadTimeoutMS = 300
	ts, _, _, _ := slowServer(t, cfg)
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(c, "POST /users/1/orders/2 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), CodeBodyTimeout) {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the 408 came after %v", d)
	}
}

// One client cannot take every slot (per_client_request_limit, by default a quarter of
// concurrency_request_limit): with 16 slots, a client sending 16 requests to a function that
// does not answer gets 4 running and 429 for the others, and another client still gets 200.
func TestPerClientLimit(t *testing.T) {
	needLoopbackAliases(t)
	cfg := Defaults()
	cfg.ConcurrencyRequestLimit = 16
	ts, _, running, release := slowServer(t, cfg)
	hog := fromAddr("127.0.0.3")
	hog.Timeout = 10 * time.Second
	statuses := make(chan int, 16)
	for range 16 {
		go func() {
			res, err := hog.Get(ts.URL + "/block")
			if err != nil {
				statuses <- -1
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			statuses <- res.StatusCode
		}()
	}
	got := map[int]int{}
	for range 12 { // the 12 beyond the client's limit answer at once
		got[<-statuses]++
	}
	enginetest.Eventually(t, "4 calls of the one client running", 10*time.Second, func() bool { return running.Load() == 4 })
	ok, other := getMany(fromAddr("127.0.0.4"), ts.URL+"/text", 10)
	close(release)
	for range 4 {
		got[<-statuses]++
	}
	t.Logf("one client's 16 requests: %v; another client's: %d of 10 got 200, others %v", got, ok, other)
	if got[http.StatusTooManyRequests] != 12 || got[http.StatusOK] != 4 {
		t.Errorf("the client's 16 requests: %v, want 12 × 429 and 4 × 200", got)
	}
	if ok != 10 {
		t.Errorf("another client got %d of 10 × 200 (others %v)", ok, other)
	}
}
