// Command bench measures the product workers on this machine, all on loopback in one process
// with a real engine:
//
//   - http: requests/s through an http trigger (client -> http worker -> engine -> Go worker ->
//     back) against a bare net/http handler doing the same work (decoding the request into the
//     same document, encoding the same answer) in the same run, and their ratio;
//   - peer: engine round trips against NATS request/reply and a one-hop WebSocket echo at each
//     concurrency of -pc, d per case (peer.go);
//   - queue: messages/s end to end, from action enqueue through the engine to the function's
//     call, on the embedded JetStream with fsync before acknowledging (the default).
//
// Counts and times are bounded: n requests per side (default 4000) at concurrency c (default
// 16), m messages (default 2000), d per peer case (default 2s). Usage:
// go run ./workers/internal/bench [-n 4000] [-c 16] [-m 2000] [-d 2s] [-pc 1,16,256] [-only http|peer|queue] [-cpuprofile f] [-memprofile f]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/httpworker"
	"github.com/iii-go/iii/workers/jsstore"
	"github.com/iii-go/iii/workers/queue"
)

func main() {
	n := flag.Int("n", 4000, "http requests per side")
	c := flag.Int("c", 16, "concurrent http clients")
	m := flag.Int("m", 2000, "queue messages")
	flag.DurationVar(&peerDur, "d", 2*time.Second, "measuring time per peer case")
	flag.StringVar(&peerConcs, "pc", "1,16,256", "concurrency levels of the peer comparison")
	flag.StringVar(&only, "only", "", "run only this part: http, peer or queue")
	flag.BoolVar(&engineOnly, "engine-only", false, "peer: measure only the engine (for profiling it)")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memprof := flag.String("memprofile", "", "write an allocation profile of the run to this file")
	flag.Parse()
	switch only {
	case "", "http", "peer", "queue":
	default:
		fmt.Fprintf(os.Stderr, "bench: -only %q: want http, peer or queue\n", only)
		os.Exit(2)
	}
	if *memprof != "" {
		defer func() {
			if f, err := os.Create(*memprof); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*n, min(*c, 256), *m); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var (
	peerDur   time.Duration
	peerConcs string
	only      string
	// engineOnly leaves NATS and the echo out of the peer cases.
	engineOnly bool
)

func wants(part string) bool { return only == "" || only == part }

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func run(n, c, m int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng := core.New(core.Options{Logger: quiet})
	ln, err := listen()
	if err != nil {
		return err
	}
	go func() { _ = eng.Serve(ctx, ln) }()
	url := "ws://" + ln.Addr().String()

	if wants("peer") {
		if err := runPeer(ctx, url, peerDur, peerConcs); err != nil {
			return err
		}
	}
	if wants("http") {
		if err := runHTTP(ctx, url, n, c, quiet); err != nil {
			return err
		}
	}
	if wants("queue") {
		return runQueue(ctx, url, m, quiet)
	}
	return nil
}

// runHTTP measures an http trigger against a bare net/http handler doing the same work.
func runHTTP(ctx context.Context, url string, n, c int, quiet *slog.Logger) error {
	fn := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-fn"})
	_ = fn.Register("bench::hello", func(_ context.Context, in json.RawMessage) (any, error) {
		var req map[string]any
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, err
		}
		return map[string]any{"status_code": 200, "body": map[string]any{"hello": req["path_params"]}}, nil
	})
	if err := fn.Start(ctx); err != nil {
		return err
	}
	defer fn.Close()

	// The http worker's server, talking to the engine through its own worker.
	hw := protocol.NewWorker(protocol.Config{URL: url, Name: "http"})
	call := func(ctx context.Context, t protocol.Trigger, f string, payload any, timeout time.Duration) (json.RawMessage, error) {
		return hw.Call(ctx, f, payload, append(t.CallOptions(), protocol.WithTimeout(timeout))...)
	}
	srv := httpworker.New(httpworker.Defaults(), call, quiet)
	pool := httpworker.NewChannelPool(hw, 0, quiet)
	defer pool.Close(context.Background())
	srv.SetChannels(pool) // as workers/cmd/http runs it
	if err := hw.RegisterTriggerType("http", "bench", srv); err != nil {
		return err
	}
	if err := hw.Start(ctx); err != nil {
		return err
	}
	defer hw.Close()
	if _, err := fn.RegisterTrigger("http", "bench::hello", map[string]string{"api_path": "/hello/:name", "http_method": "POST"}); err != nil {
		return err
	}
	hln, err := listen()
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(hln, srv) }()

	// The baseline: the same work without the engine hop.
	bare := bareHandler()
	bln, err := listen()
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(bln, bare) }()

	// Wait until the route is live.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c}, Timeout: 10 * time.Second}
	trig := "http://" + hln.Addr().String() + "/hello/x"
	if err := waitLive(client, trig); err != nil {
		return err
	}
	load := func(url string, n int) (time.Duration, error) { return postLoad(client, c, url, n) }
	// Alternating slices, so that load from elsewhere on the machine falls on both alike.
	const rounds = 4
	per := max(n/rounds, 1)
	var baseT, trigT time.Duration
	for _, u := range []string{"http://" + bln.Addr().String() + "/hello/x", trig} { // warm-up: connections, buffers
		if _, err := load(u, per); err != nil {
			return err
		}
	}
	for range rounds {
		t, err := load("http://"+bln.Addr().String()+"/hello/x", per)
		if err != nil {
			return err
		}
		baseT += t
		if t, err = load(trig, per); err != nil {
			return err
		}
		trigT += t
	}
	base, viaTrig := float64(rounds*per)/baseT.Seconds(), float64(rounds*per)/trigT.Seconds()
	fmt.Printf("http: bare net/http handler   %9.0f req/s  (%d requests, %d clients)\n", base, rounds*per, c)
	fmt.Printf("http: http trigger via engine %9.0f req/s  = %.0f%% of bare (target >= 50%%)\n", viaTrig, 100*viaTrig/base)
	return nil
}

// bareHandler is the baseline: the work of the http trigger and its function without the
// engine hop.
func bareHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b any
		_ = json.Unmarshal(body, &b)
		headers := map[string]string{}
		for k, v := range r.Header {
			headers[k] = v[0]
		}
		doc, _ := json.Marshal(map[string]any{"method": r.Method, "path": r.URL.Path, "path_params": map[string]string{"name": "x"},
			"query_params": map[string]string{}, "headers": headers, "body": b})
		var req map[string]any
		_ = json.Unmarshal(doc, &req)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"hello": req["path_params"]})
	})
}

// waitLive polls url with POSTs until one answers 200, for at most 10 s.
func waitLive(client *http.Client, url string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := client.Post(url, "application/json", bytes.NewReader([]byte(`{}`)))
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the http trigger did not become live within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// postLoad sends n POSTs to url from c concurrent clients and returns the time they took; any
// request that fails or does not answer 200 fails the run.
func postLoad(client *http.Client, c int, url string, n int) (time.Duration, error) {
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				res, err := client.Post(url, "application/json", bytes.NewReader([]byte(`{"order":1}`)))
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return 0, fmt.Errorf("%d of %d requests to %s failed", f, n, url)
	}
	return time.Since(start), nil
}

// runQueue measures messages/s from action enqueue to the function's call.
func runQueue(ctx context.Context, url string, m int, quiet *slog.Logger) error {
	var jobs atomic.Int64
	jobsDone := make(chan struct{})
	fn := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-job"})
	_ = fn.Register("bench::job", func(context.Context, json.RawMessage) (any, error) {
		if jobs.Add(1) == int64(m) {
			close(jobsDone)
		}
		return nil, nil
	})
	if err := fn.Start(ctx); err != nil {
		return err
	}
	defer fn.Close()

	// Queue: enqueue m jobs through the engine, measure until the function ran m times.
	dir, err := os.MkdirTemp("", "iii-bench-queue-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := jsstore.Open(ctx, jsstore.Config{}, dir, "bench")
	if err != nil {
		return err
	}
	defer st.Close()
	qw := protocol.NewWorker(protocol.Config{URL: url, Name: "queue"})
	qcall := func(ctx context.Context, f, ns string, data, meta json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
		return qw.Call(ctx, f, data, protocol.WithTimeout(timeout))
	}
	qsvc, err := queue.Open(ctx, st.JS, "default", queue.Config{Queues: map[string]queue.Settings{"bench": {Concurrency: 32}}}, qcall, quiet)
	if err != nil {
		return err
	}
	defer qsvc.Close()
	_ = qw.Register("queue::enqueue", qsvc.Enqueue)
	if err := qw.Start(ctx); err != nil {
		return err
	}
	defer qw.Close()
	producer := protocol.NewWorker(protocol.Config{URL: url, Name: "producer"})
	if err := producer.Start(ctx); err != nil {
		return err
	}
	defer producer.Close()
	start := time.Now()
	var wg sync.WaitGroup
	var next atomic.Int64
	var enqErr atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(m) {
				if _, err := producer.Call(ctx, "bench::job", map[string]int{"n": 1}, protocol.Enqueue("bench")); err != nil {
					enqErr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := enqErr.Load().(error); ok {
		return err
	}
	enqueued := time.Since(start)
	select {
	case <-jobsDone:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("only %d of %d queued jobs ran within 2 minutes", jobs.Load(), m)
	}
	total := time.Since(start)
	fmt.Printf("queue: enqueue (stored, fsynced) %7.0f msgs/s; end to end %7.0f msgs/s  (%d messages)\n",
		float64(m)/enqueued.Seconds(), float64(m)/total.Seconds(), m)
	return nil
}
