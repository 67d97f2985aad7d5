package testscripts

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/protocol"
)

func init() {
	registerCmd("natsprobe", cmdNATSProbe)
}

// natsProbeWait is how long a natsprobe waits for an answer it must not get.
const natsProbeWait = 2 * time.Second

// natsprobe MODE NATS_URL ARGS: a plain NATS client of the engines' NATS servers, without the
// cluster key, that plays an outsider against the engines of a cluster:
//
//	call NS FN JSON     send an unsigned call of FN in NS with JSON as its data and a forged
//	                    caller; prints "answered DATA" or "no answer" after natsProbeWait
//	replay NS FN        record the call of FN that it makes through $III_URL's engine, then
//	                    send it again, once as recorded and once with its own reply inbox;
//	                    prints "answered DATA" for any second answer, else "no answer"
//	answer NS FN        until the script ends, answer every call of FN with {"forged":true}
//	announce ENGINE FN  announce an engine ENGINE offering FN in default, with a worker row
//	chanowner FILE      until the script ends, answer every question for a channel's holder
//	                    with the URL of its own WebSocket listener, which appends each request
//	                    it gets (path and query) to FILE
//
// call and replay succeed when answered: `! natsprobe call …` requires the engines to refuse.
func cmdNATSProbe(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: natsprobe call|replay|answer|announce|chanowner NATS_URL ARGS...")
	}
	mode, url, args := args[0], args[1], args[2:]
	nc, err := nats.Connect(url, nats.Name("natsprobe"))
	ts.Check(err)
	keep := false
	defer func() {
		if !keep {
			nc.Close()
		}
	}()
	subj := func(ns, fn string) string {
		return "iii.fn." + hex.EncodeToString([]byte(ns)) + "." + hex.EncodeToString([]byte(fn))
	}
	answered := func(what string, data []byte, ok bool) {
		if ok {
			fmt.Fprintf(ts.Stdout(), "answered %s\n", data)
		} else {
			fmt.Fprintln(ts.Stdout(), "no answer")
		}
		if ok == neg {
			ts.Fatalf("natsprobe %s: answered=%v", what, ok)
		}
	}
	switch {
	case mode == "call" && len(args) == 3:
		body, _ := json.Marshal(map[string]any{"data": json.RawMessage(args[2]), "timeout_ms": 1000,
			"caller": map[string]string{"worker_id": "forged-owner", "name": "owner", "engine": "forged"}})
		m, err := nc.Request(subj(args[0], args[1]), body, natsProbeWait)
		answered("call", dataOf(m), err == nil)
	case mode == "replay" && len(args) == 2:
		rec, err := nc.SubscribeSync(subj(args[0], args[1]))
		ts.Check(err)
		ts.Check(nc.Flush())
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		w, err := protocol.Connect(ctx, protocol.Config{URL: ts.Getenv("III_URL"), Name: "natsprobe", Namespace: args[0], NoReconnect: true, TokenFile: os.DevNull})
		ts.Check(err)
		defer w.Close()
		_, err = w.Call(ctx, args[1], map[string]string{"recorded": "yes"})
		ts.Check(err)
		m, err := rec.NextMsg(5 * time.Second)
		ts.Check(err)
		first, err := nc.SubscribeSync(m.Reply) // the engine's own inbox: a second answer shows up here
		ts.Check(err)
		own := nats.NewInbox()
		second, err := nc.SubscribeSync(own)
		ts.Check(err)
		ts.Check(nc.PublishMsg(&nats.Msg{Subject: m.Subject, Reply: m.Reply, Header: m.Header, Data: m.Data}))
		ts.Check(nc.PublishMsg(&nats.Msg{Subject: m.Subject, Reply: own, Header: m.Header, Data: m.Data}))
		deadline := time.Now().Add(natsProbeWait)
		var got *nats.Msg
		for got == nil && time.Now().Before(deadline) {
			if a, err := first.NextMsg(50 * time.Millisecond); err == nil {
				got = a
			} else if a, err := second.NextMsg(50 * time.Millisecond); err == nil {
				got = a
			}
		}
		answered("replay", dataOf(got), got != nil)
	case mode == "answer" && len(args) == 2 && !neg:
		_, err := nc.QueueSubscribe(subj(args[0], args[1]), "iii-engines", func(m *nats.Msg) {
			_ = m.Respond([]byte(`{"result":{"forged":true}}`))
		})
		ts.Check(err)
		ts.Check(nc.Flush())
		keep = true
		ts.Defer(nc.Close)
	case mode == "announce" && len(args) == 2 && !neg:
		a, _ := json.Marshal(map[string]any{"engine": args[0],
			"functions": []map[string]string{{"namespace": "default", "function_id": args[1], "worker_id": "w-forged", "engine": args[0]}},
			"workers":   []map[string]any{{"id": "w-forged", "name": "forged-worker", "functions": []string{args[1]}}}})
		ts.Check(nc.Publish("iii.engines.fn."+hex.EncodeToString([]byte(args[0])), a))
		ts.Check(nc.Flush())
	case mode == "chanowner" && len(args) == 1 && !neg:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		ts.Check(err)
		file := ts.MkAbs(args[0])
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintln(f, r.URL.RequestURI())
				f.Close()
			}
			http.Error(w, "natsprobe", http.StatusTeapot)
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		own := "ws://" + ln.Addr().String()
		_, err = nc.Subscribe("iii.ch.*", func(m *nats.Msg) { _ = m.Respond([]byte(own)) })
		ts.Check(err)
		ts.Check(nc.Flush())
		keep = true
		ts.Defer(func() { nc.Close(); _ = srv.Close() })
	default:
		ts.Fatalf("usage: natsprobe call NATS_URL NS FN JSON | replay NATS_URL NS FN | answer NATS_URL NS FN | announce NATS_URL ENGINE FN | chanowner NATS_URL FILE (%s)", strings.Join(args, " "))
	}
}

func dataOf(m *nats.Msg) []byte {
	if m == nil {
		return nil
	}
	return m.Data
}
