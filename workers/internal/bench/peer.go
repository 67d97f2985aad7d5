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
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-go/iii/engine/benchbase"
	"github.com/iii-go/iii/engine/protocol"
)

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
		_, err := caller.Request("bench.echo", benchbase.Payload, 30*time.Second)
		return err
	}
	stop = func() {
		caller.Close()
		resp.Close()
		srv.Shutdown()
	}
	return call, stop, nil
}

// runPeer prints the engine, NATS and echo side by side at each concurrency of concs (the
// engine alone with -engine-only, which then starts neither NATS nor the echo).
func runPeer(ctx context.Context, url string, d time.Duration, concs string) error {
	echoWorker := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-echo"})
	_ = echoWorker.Register(benchbase.EchoFunction, func(_ context.Context, in json.RawMessage) (any, error) { return in, nil })
	client := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-caller"})
	for _, w := range []*protocol.Worker{echoWorker, client} {
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer w.Close()
	}
	cases := []func() error{func() error {
		_, err := client.Call(ctx, benchbase.EchoFunction, benchbase.Payload)
		return err
	}}
	if !engineOnly {
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
		go func() { _ = benchbase.ServeEcho(eln) }()
		echo, err := benchbase.DialEcho("ws://" + eln.Addr().String())
		if err != nil {
			return err
		}
		defer echo.Close()
		cases = append(cases, natsCall, echo.Call)
		fmt.Printf("peer: engine round trip vs NATS request/reply (embedded nats-server, loopback TCP) vs one-hop WebSocket echo, %v each, alternating slices\n", d)
	} else {
		fmt.Printf("peer: engine round trip alone, %v each\n", d)
	}
	for _, f := range strings.Split(concs, ",") {
		conc, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || conc < 1 {
			return fmt.Errorf("bad -pc value %q", f)
		}
		r, err := benchbase.Compare(conc, d, cases...)
		if err != nil {
			return err
		}
		e := r[0]
		fmt.Printf("  c=%-3d engine %s\n", conc, e)
		if len(r) < 3 {
			continue
		}
		n, w := r[1], r[2]
		fmt.Printf("        nats   %s\n", n)
		fmt.Printf("        echo   %s\n", w)
		fmt.Printf("        engine/NATS: %.0f%% of calls/s (%.0f%% per CPU-second), p99 %.2fx NATS's; engine/echo: %.0f%% of calls/s\n",
			100*e.Rate()/n.Rate(), 100*e.CPURate()/n.CPURate(), float64(e.P99)/float64(n.P99), 100*e.Rate()/w.Rate())
	}
	return nil
}
