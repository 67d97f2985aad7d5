package main

// The peer comparison: an engine round trip (caller worker -> engine -> serving worker -> back)
// beside NATS request/reply through an embedded nats-server on loopback TCP (caller -> broker
// -> responder -> back, the same two hops) and a one-hop WebSocket echo, with the same ~90-byte
// JSON payload, measured in alternating slices in one process so that load from elsewhere on the
// machine falls on all three alike. It lives in the workers module because the engine module
// does not depend on NATS.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-go/iii/engine/protocol"
)

var peerPayload = json.RawMessage(`{"sandbox_id":"0d6f8c1e-3a1b-4c55-9a4e-0d2f7a1b9c10","cmd":"echo","args":["hello"]}`)

// peerResult is one case's measurement.
type peerResult struct {
	calls    int
	elapsed  time.Duration
	cpu      time.Duration // CPU time of this process (user+system) while the case ran
	p50, p99 time.Duration
}

func (r peerResult) rate() float64 { return float64(r.calls) / r.elapsed.Seconds() }

// cpuRate is calls per CPU-second of this process: steadier than calls/s when other work
// shares the machine.
func (r peerResult) cpuRate() float64 { return float64(r.calls) / r.cpu.Seconds() }

func (r peerResult) String() string {
	return fmt.Sprintf("%9.0f calls/s  p50 %8s  p99 %8s  (%6.0f calls per CPU-second)", r.rate(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.cpuRate())
}

// measure runs conc loops of call for d and adds the calls and latencies to r.
func measure(r *peerResult, lats *[]time.Duration, conc int, d time.Duration, call func() error) error {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errv atomic.Value
	)
	start, cpu0 := time.Now(), cpuTime()
	stop := start.Add(d)
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
			*lats = append(*lats, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.elapsed += time.Since(start)
	r.cpu += cpuTime() - cpu0
	if err, ok := errv.Load().(error); ok {
		return err
	}
	return nil
}

// compareN measures every case in turn, rounds times, after a warm-up of each.
func compareN(conc int, d time.Duration, cases []func() error) ([]peerResult, error) {
	const rounds = 8
	res := make([]peerResult, len(cases))
	lats := make([][]time.Duration, len(cases))
	for _, f := range cases {
		var w peerResult
		var l []time.Duration
		if err := measure(&w, &l, conc, d/10, f); err != nil {
			return nil, err
		}
	}
	for range rounds {
		for i, f := range cases {
			if err := measure(&res[i], &lats[i], conc, d/rounds, f); err != nil {
				return nil, err
			}
		}
	}
	for i := range res {
		l := lats[i]
		sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
		res[i].calls = len(l)
		if len(l) > 0 {
			res[i].p50 = l[min(len(l)-1, len(l)/2)]
			res[i].p99 = l[min(len(l)-1, len(l)*99/100)]
		}
	}
	return res, nil
}

// peerEcho is the one-hop baseline: a WebSocket server answering every invokefunction frame
// with an invocationresult carrying its data, and a client matching replies by invocation id.
type peerEcho struct {
	c       *websocket.Conn
	wmu     sync.Mutex
	next    atomic.Uint64
	mu      sync.Mutex
	pending map[string]chan struct{}
}

func serveEcho(ln net.Listener) {
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

func dialPeerEcho(url string) (*peerEcho, error) {
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(protocol.MaxFrameBytes)
	pe := &peerEcho{c: c, pending: map[string]chan struct{}{}}
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
			pe.mu.Lock()
			ch := pe.pending[m.InvocationID]
			delete(pe.pending, m.InvocationID)
			pe.mu.Unlock()
			if ch != nil {
				close(ch)
			}
		}
	}()
	return pe, nil
}

func (pe *peerEcho) call() error {
	id := strconv.FormatUint(pe.next.Add(1), 36)
	ch := make(chan struct{})
	pe.mu.Lock()
	pe.pending[id] = ch
	pe.mu.Unlock()
	b, _ := protocol.Encode(&protocol.Message{Type: protocol.TypeInvokeFunction, InvocationID: id, FunctionID: "bench::echo", Data: peerPayload, TimeoutMS: 30000})
	pe.wmu.Lock()
	err := pe.c.Write(context.Background(), websocket.MessageText, b)
	pe.wmu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("echo baseline: no reply within 30s")
	}
}

// startNATS starts an embedded nats-server on a free loopback port and connects a responder
// echoing every request on bench.echo and a caller; stop shuts all of it down.
func startNATS() (call func() error, stop func(), err error) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		return nil, nil, err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, nil, errors.New("the embedded NATS server did not become ready within 10s")
	}
	resp, err := nats.Connect(srv.ClientURL())
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	if _, err := resp.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		resp.Close()
		srv.Shutdown()
		return nil, nil, err
	}
	if err := resp.Flush(); err != nil {
		resp.Close()
		srv.Shutdown()
		return nil, nil, err
	}
	caller, err := nats.Connect(srv.ClientURL())
	if err != nil {
		resp.Close()
		srv.Shutdown()
		return nil, nil, err
	}
	call = func() error {
		_, err := caller.Request("bench.echo", peerPayload, 30*time.Second)
		return err
	}
	stop = func() {
		caller.Close()
		resp.Close()
		srv.Shutdown()
	}
	return call, stop, nil
}

// runPeer prints the engine, NATS and echo side by side at each concurrency of concs.
func runPeer(ctx context.Context, url string, d time.Duration, concs string) error {
	server := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-echo"})
	_ = server.Register("bench::echo", func(_ context.Context, in json.RawMessage) (any, error) { return in, nil })
	client := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-caller"})
	for _, w := range []*protocol.Worker{server, client} {
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer w.Close()
	}
	natsCall, stopNATS, err := startNATS()
	if err != nil {
		return err
	}
	defer stopNATS()
	eln, err := listen()
	if err != nil {
		return err
	}
	defer eln.Close()
	go serveEcho(eln)
	echo, err := dialPeerEcho("ws://" + eln.Addr().String())
	if err != nil {
		return err
	}
	defer echo.c.CloseNow()
	viaEngine := func() error {
		_, err := client.Call(ctx, "bench::echo", peerPayload)
		return err
	}

	fmt.Printf("peer: engine round trip vs NATS request/reply (embedded nats-server, loopback TCP) vs one-hop WebSocket echo, %v each, alternating slices\n", d)
	for _, f := range strings.Split(concs, ",") {
		conc, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || conc < 1 {
			return fmt.Errorf("bad -pc value %q", f)
		}
		if engineOnly {
			r, err := compareN(conc, d, []func() error{viaEngine})
			if err != nil {
				return err
			}
			fmt.Printf("  c=%-3d engine %s\n", conc, r[0])
			continue
		}
		r, err := compareN(conc, d, []func() error{viaEngine, natsCall, echo.call})
		if err != nil {
			return err
		}
		e, n, w := r[0], r[1], r[2]
		fmt.Printf("  c=%-3d engine %s\n", conc, e)
		fmt.Printf("        nats   %s\n", n)
		fmt.Printf("        echo   %s\n", w)
		fmt.Printf("        engine/NATS: %.0f%% of calls/s (%.0f%% per CPU-second), p99 %.2fx NATS's; engine/echo: %.0f%% of calls/s\n",
			100*e.rate()/n.rate(), 100*e.cpuRate()/n.cpuRate(), float64(e.p99)/float64(n.p99), 100*e.rate()/w.rate())
	}
	return nil
}
