// Command bench measures the engine on this machine, all on loopback in one process:
//
//   - round trips Go worker -> engine -> Go worker at concurrency 1, 16 and 256, beside a direct
//     WebSocket echo baseline (the same frames, one hop) measured the same way, and their ratio;
//   - the sandbox router hop (sandbox::exec -> <adapter>::exec) against a direct call of the
//     adapter function at concurrency 16, and the router's overhead.
//
// Usage: go run ./engine/internal/bench [-d 2s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox"
)

type result struct {
	calls    int
	elapsed  time.Duration
	cpu      time.Duration
	p50, p99 time.Duration
}

func (r result) rate() float64 { return float64(r.calls) / r.elapsed.Seconds() }

// cpuRate is calls per CPU-second of this process: stable when other work shares the machine.
func (r result) cpuRate() float64 { return float64(r.calls) / r.cpu.Seconds() }

// String formats one measurement line.
func (r result) String() string {
	return fmt.Sprintf("%9.0f calls/s  p50 %8s  p99 %8s  (%6.0f calls per CPU-second)", r.rate(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.cpuRate())
}

// sample is one measured slice: its calls, wall time and latencies.
type sample struct {
	elapsed time.Duration
	cpu     time.Duration // CPU time of this process (user+system) during the slice
	lats    []time.Duration
}

// run measures conc loops of call for d.
func run(conc int, d time.Duration, call func() error) (sample, error) {
	var (
		mu   sync.Mutex
		s    sample
		wg   sync.WaitGroup
		errv atomic.Value
	)
	stop := time.Now().Add(d)
	start := time.Now()
	cpu0 := cpuTime()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			for time.Now().Before(stop) {
				t := time.Now()
				if err := call(); err != nil {
					errv.Store(err)
					return
				}
				local = append(local, time.Since(t))
			}
			mu.Lock()
			s.lats = append(s.lats, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	s.cpu = cpuTime() - cpu0
	if err, ok := errv.Load().(error); ok {
		return s, err
	}
	return s, nil
}

func summarize(samples []sample) result {
	var r result
	var lats []time.Duration
	for _, s := range samples {
		r.elapsed += s.elapsed
		r.cpu += s.cpu
		lats = append(lats, s.lats...)
	}
	r.calls = len(lats)
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	pct := func(p float64) time.Duration {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(len(lats)-1, int(float64(len(lats))*p))]
	}
	r.p50, r.p99 = pct(0.50), pct(0.99)
	return r
}

// compare measures a and b in alternating slices (rounds of d/rounds each, after a warm-up), so
// that load from elsewhere on the machine falls on both alike.
func compare(conc int, d time.Duration, a, b func() error) (result, result, error) {
	const rounds = 8
	for _, f := range []func() error{a, b} {
		if _, err := run(conc, d/10, f); err != nil {
			return result{}, result{}, err
		}
	}
	var sa, sb []sample
	for range rounds {
		x, err := run(conc, d/rounds, a)
		if err != nil {
			return result{}, result{}, err
		}
		y, err := run(conc, d/rounds, b)
		if err != nil {
			return result{}, result{}, err
		}
		sa, sb = append(sa, x), append(sb, y)
	}
	return summarize(sa), summarize(sb), nil
}

var payload = json.RawMessage(`{"sandbox_id":"0d6f8c1e-3a1b-4c55-9a4e-0d2f7a1b9c10","cmd":"echo","args":["hello"]}`)

// echoServer answers every invokefunction frame with an invocationresult carrying its data: the
// one-hop baseline.
func echoServer(ln net.Listener) {
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(protocol.MaxFrameBytes)
		ctx := context.Background()
		var wmu sync.Mutex
		for {
			_, b, err := c.Read(ctx)
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
				_ = c.Write(ctx, websocket.MessageText, out)
				wmu.Unlock()
			}()
		}
	}))
}

// echoClient sends invokefunction frames and matches replies by invocation id, like the SDK.
type echoClient struct {
	c       *websocket.Conn
	wmu     sync.Mutex
	next    atomic.Uint64
	mu      sync.Mutex
	pending map[string]chan *protocol.Message
}

func dialEcho(url string) (*echoClient, error) {
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(protocol.MaxFrameBytes)
	ec := &echoClient{c: c, pending: map[string]chan *protocol.Message{}}
	go func() {
		for {
			_, b, err := c.Read(context.Background())
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
				ch <- m
			}
		}
	}()
	return ec, nil
}

func (ec *echoClient) call() error {
	id := strconv.FormatUint(ec.next.Add(1), 36)
	ch := make(chan *protocol.Message, 1)
	ec.mu.Lock()
	ec.pending[id] = ch
	ec.mu.Unlock()
	b, _ := protocol.Encode(&protocol.Message{Type: protocol.TypeInvokeFunction, InvocationID: id, FunctionID: "bench::echo", Data: payload, TimeoutMS: 30000})
	ec.wmu.Lock()
	err := ec.c.Write(context.Background(), websocket.MessageText, b)
	ec.wmu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("echo baseline: no reply")
	}
}

func listen() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return ln
}

// startEngine serves an engine with the sandbox router bound to the benchbox adapter on a
// loopback port and starts the echo server, the adapter and the client workers on it; it
// returns the started workers, the client last, for the caller to close.
func startEngine(ctx context.Context) []*protocol.Worker {
	eln := listen()
	eng := core.New(core.Options{Logger: quiet()})
	sandbox.New(eng, &sandbox.Binding{Adapter: "benchbox", Namespace: "adapter", Source: "config"}).Install()
	go func() { _ = eng.Serve(ctx, eln) }()
	url := "ws://" + eln.Addr().String()

	echo := func(_ context.Context, in json.RawMessage) (any, error) { return in, nil }
	server := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-server"})
	_ = server.Register("bench::echo", echo)
	adapter := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-adapter", Namespace: "adapter"})
	_ = adapter.Register("benchbox::exec", echo)
	_ = adapter.Register("benchbox::adapter::info", func(context.Context, json.RawMessage) (any, error) {
		return map[string]any{"adapter": "benchbox", "adapter_version": "0", "contract": map[string]int{"major": 1, "minor": 1}}, nil
	})
	client := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-client"})
	for _, w := range []*protocol.Worker{server, adapter, client} {
		if err := w.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	return []*protocol.Worker{server, adapter, client}
}

func main() {
	d := flag.Duration("d", 2*time.Second, "measuring time per case")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	concs := flag.String("c", "1,16,256", "concurrency levels of the engine/echo comparison")
	router := flag.Bool("router", true, "also measure the sandbox router hop")
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	workers := startEngine(ctx)
	for _, w := range workers {
		defer w.Close()
	}
	client := workers[len(workers)-1]
	bln := listen()
	go echoServer(bln)
	ec, err := dialEcho("ws://" + bln.Addr().String())
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}

	cmp := func(conc int, a, b func() error) (result, result) {
		ra, rb, err := compare(conc, *d, a, b)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return ra, rb
	}
	viaEngine := func(fn string, opts ...protocol.CallOption) func() error {
		return func() error {
			_, err := client.Call(ctx, fn, payload, opts...)
			return err
		}
	}

	fmt.Printf("engine round trips (Go worker -> engine -> Go worker) vs direct WebSocket echo, %v each, measured in alternating slices\n", *d)
	for _, f := range strings.Split(*concs, ",") {
		conc, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || conc < 1 {
			fmt.Fprintln(os.Stderr, "bench: bad -c value", f)
			os.Exit(2)
		}
		e, b := cmp(conc, viaEngine("bench::echo"), ec.call)
		fmt.Printf("  c=%-3d engine %s\n", conc, e)
		fmt.Printf("        echo   %s\n", b)
		fmt.Printf("        engine/echo ratio: %.0f%% of calls/s, %.0f%% of calls per CPU-second\n", 100*e.rate()/b.rate(), 100*e.cpuRate()/b.cpuRate())
	}
	if !*router {
		return
	}
	fmt.Println("sandbox router hop (sandbox::exec) vs direct adapter call (benchbox::exec), c=16")
	direct, routed := cmp(16, viaEngine("benchbox::exec", protocol.InNamespace("adapter")), viaEngine("sandbox::exec"))
	fmt.Printf("  direct %s\n", direct)
	fmt.Printf("  router %s\n", routed)
	fmt.Printf("  router overhead: %.1f%% calls/s, %.1f%% calls per CPU-second, %.1f%% p50 latency\n",
		100*(direct.rate()-routed.rate())/direct.rate(), 100*(direct.cpuRate()-routed.cpuRate())/direct.cpuRate(),
		100*(float64(routed.p50)-float64(direct.p50))/float64(direct.p50))
}
