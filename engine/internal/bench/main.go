// Command bench measures the engine on this machine, all on loopback in one process:
//
//   - round trips Go worker -> engine -> Go worker at concurrency 1, 16 and 256, beside a direct
//     WebSocket echo baseline (the same frames, one hop) measured the same way, and their ratio;
//   - the sandbox router hop (sandbox::exec -> <adapter>::exec) against a direct call of the
//     adapter function at concurrency 16, measured in alternating slices: the router's overhead
//     in calls/s and its p50 and p99 against the direct call's, each beside its target
//     (RouterOverheadTarget, RouterP99Target).
//
// Usage: go run ./engine/internal/bench [-d 2s] [-engine=false] [-router=false]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/benchbase"
	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox"
)

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
	_ = server.Register(benchbase.EchoFunction, echo)
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

// The router hop's targets: at most this share of the direct call's calls/s lost, and a p99 at
// most this multiple of the direct call's.
const (
	RouterOverheadTarget = 0.10
	RouterP99Target      = 1.2
)

// verdict says whether a measured figure met its target.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

func main() {
	d := flag.Duration("d", 2*time.Second, "measuring time per case")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	concs := flag.String("c", "1,16,256", "concurrency levels of the engine/echo comparison")
	engine := flag.Bool("engine", true, "measure the engine/echo comparison")
	router := flag.Bool("router", true, "measure the sandbox router hop")
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
	go func() { _ = benchbase.ServeEcho(bln) }()
	ec, err := benchbase.DialEcho("ws://" + bln.Addr().String())
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}

	cmp := func(conc int, a, b func() error) (benchbase.Result, benchbase.Result) {
		r, err := benchbase.Compare(conc, *d, a, b)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return r[0], r[1]
	}
	viaEngine := func(fn string, opts ...protocol.CallOption) func() error {
		return func() error {
			_, err := client.Call(ctx, fn, benchbase.Payload, opts...)
			return err
		}
	}

	if *engine {
		fmt.Printf("engine round trips (Go worker -> engine -> Go worker) vs direct WebSocket echo, %v each, measured in alternating slices\n", *d)
	}
	for _, f := range strings.Split(*concs, ",") {
		if !*engine {
			break
		}
		conc, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || conc < 1 {
			fmt.Fprintln(os.Stderr, "bench: bad -c value", f)
			os.Exit(2)
		}
		e, b := cmp(conc, viaEngine(benchbase.EchoFunction), ec.Call)
		fmt.Printf("  c=%-3d engine %s\n", conc, e)
		fmt.Printf("        echo   %s\n", b)
		fmt.Printf("        engine/echo ratio: %.0f%% of calls/s, %.0f%% of calls per CPU-second\n", 100*e.Rate()/b.Rate(), 100*e.CPURate()/b.CPURate())
	}
	if !*router {
		return
	}
	fmt.Printf("sandbox router hop (sandbox::exec) vs direct adapter call (benchbox::exec), c=16, %v each, measured in alternating slices\n", *d)
	direct, routed := cmp(16, viaEngine("benchbox::exec", protocol.InNamespace("adapter")), viaEngine("sandbox::exec"))
	fmt.Printf("  direct %s\n", direct)
	fmt.Printf("  router %s\n", routed)
	overhead := (direct.Rate() - routed.Rate()) / direct.Rate()
	p99 := float64(routed.P99) / float64(direct.P99)
	fmt.Printf("  router overhead: %.1f%% calls/s (target <= %.0f%%: %s), %.1f%% calls per CPU-second\n",
		100*overhead, 100*RouterOverheadTarget, verdict(overhead <= RouterOverheadTarget), 100*(direct.CPURate()-routed.CPURate())/direct.CPURate())
	fmt.Printf("  router/direct latency: p50 %.2fx, p99 %.2fx (target <= %.1fx: %s)\n",
		float64(routed.P50)/float64(direct.P50), p99, RouterP99Target, verdict(p99 <= RouterP99Target))
}
