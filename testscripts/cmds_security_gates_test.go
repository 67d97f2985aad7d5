package testscripts

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/protocol"
)

// Commands of the RBAC gate scenarios (security/gates_*): a trusted worker serving an auth
// function and the functions it guards, and a raw WebSocket client that sends text or binary
// frames and can hold its connection open.

func init() {
	registerCmd("gatesworker", cmdGatesWorker)
	registerCmd("wsframes", cmdWSFrames)
}

var (
	gatesMu      sync.Mutex
	gatesWorkers = map[string]*protocol.Worker{} // gatesworker workers, by $WORK and script-chosen name
	gatesHeld    = map[string]func(){}           // wsframes -hold connections' closers, likewise
)

// gatesAuth is the auth function of the gate scenarios: it admits by the upgrade's query
// parameter token ("good": default rights and context {user: alice}; "provider": also
// allow_trigger_type_registration; "typo": a result with the misspelt key forbiden_functions)
// and refuses any other.
func gatesAuth(_ context.Context, in json.RawMessage) (any, error) {
	var a struct {
		QueryParams map[string][]string `json:"query_params"`
	}
	_ = json.Unmarshal(in, &a)
	tok := ""
	if v := a.QueryParams["token"]; len(v) > 0 {
		tok = v[0]
	}
	switch tok {
	case "good":
		return map[string]any{"context": map[string]any{"user": "alice"}}, nil
	case "provider":
		return map[string]any{"allow_trigger_type_registration": true}, nil
	case "typo":
		return map[string]any{"forbiden_functions": []string{"api::hello"}}, nil
	}
	return nil, fmt.Errorf("invalid token %q", tok)
}

// gatesworker start [-trigger PATH] NAME | stop NAME: start (or stop) a trusted worker named
// NAME on $III_URL's main listener, in default, serving gate::auth (gatesAuth), secret::fn
// ({secret: "TOPSECRET-42"}), secret::page (an http response whose body is {admin_token:
// "TOPSECRET-PAGE-7"}) and api::hello (an http response {hello: true}); with -trigger it binds an
// http trigger of api::hello to PATH. It runs until stopped or the script ends; start returns
// once the engine accepted its functions.
func cmdGatesWorker(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("gatesworker", flag.ContinueOnError)
	trigger := fs.String("trigger", "", "")
	if neg || len(args) < 1 || fs.Parse(args[1:]) != nil || fs.NArg() != 1 || (args[0] != "start" && args[0] != "stop") {
		ts.Fatalf("usage: gatesworker start [-trigger PATH] NAME | gatesworker stop NAME")
	}
	key := ts.Getenv("WORK") + "\x00" + fs.Arg(0)
	gatesMu.Lock()
	w := gatesWorkers[key]
	delete(gatesWorkers, key)
	gatesMu.Unlock()
	if args[0] == "stop" {
		if w == nil {
			ts.Fatalf("gatesworker: no worker %s", fs.Arg(0))
		}
		_ = w.Close()
		return
	}
	if w != nil {
		ts.Fatalf("gatesworker: %s is running", fs.Arg(0))
	}
	w = protocol.NewWorker(protocol.Config{URL: ts.Getenv("III_URL"), Namespace: protocol.DefaultNamespace, Name: "gates-" + fs.Arg(0),
		NoReconnect: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for id, h := range map[string]protocol.Handler{
		"gate::auth": gatesAuth,
		"secret::fn": func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"secret": "TOPSECRET-42"}, nil
		},
		"secret::page": func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"status_code": 200, "body": map[string]any{"admin_token": "TOPSECRET-PAGE-7"}}, nil
		},
		"api::hello": func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"status_code": 200, "body": map[string]any{"hello": true}}, nil
		},
	} {
		ts.Check(w.Register(id, h))
	}
	if *trigger != "" {
		_, err := w.RegisterTrigger("http", "api::hello", map[string]any{"api_path": *trigger, "http_method": "GET"})
		ts.Check(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts.Check(w.Start(ctx))
	gatesMu.Lock()
	gatesWorkers[key] = w
	gatesMu.Unlock()
	ts.Defer(func() { _ = w.Close() })
}

// wsframes [-timeout=5s] [-hold NAME] URL FRAME... | wsframes -close NAME: open a raw
// WebSocket to URL and send each FRAME, as a text frame, or as a binary one when it starts with
// "bin:" (the prefix is not sent), then a text ping. It prints each frame received until the
// pong and an answer to every invokefunction sent with an invocation_id, text or binary:
// "invocationresult ID ok|CODE", "registrationrejected CODE FUNCTION_ID",
// "triggerregistrationresult ID CODE", "error CODE" (a refused connection), else the type; an
// invocation not answered within the timeout prints "noanswer ID", and a connection that closes
// first "closed STATUS REASON". With -hold the connection stays open (answering nothing) until
// "wsframes -close NAME" or the end of the script.
func cmdWSFrames(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("wsframes", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 5*time.Second, "")
	hold := fs.String("hold", "", "")
	closeName := fs.String("close", "", "")
	if neg || fs.Parse(args) != nil {
		ts.Fatalf("usage: wsframes [-timeout=5s] [-hold NAME] URL FRAME... | wsframes -close NAME")
	}
	if *closeName != "" {
		key := ts.Getenv("WORK") + "\x00" + *closeName
		gatesMu.Lock()
		stop := gatesHeld[key]
		delete(gatesHeld, key)
		gatesMu.Unlock()
		if stop == nil {
			ts.Fatalf("wsframes: no held connection %s", *closeName)
		}
		stop()
		return
	}
	if fs.NArg() < 1 {
		ts.Fatalf("usage: wsframes [-timeout=5s] [-hold NAME] URL FRAME...")
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	c, _, err := websocket.Dial(dctx, fs.Arg(0), nil)
	ts.Check(err)
	keep := false
	defer func() {
		if !keep {
			_ = c.CloseNow()
		}
	}()
	waiting := map[string]bool{}
	for _, f := range fs.Args()[1:] {
		typ := websocket.MessageText
		if b, ok := strings.CutPrefix(f, "bin:"); ok {
			typ, f = websocket.MessageBinary, b
		}
		var m struct {
			Type         string `json:"type"`
			InvocationID string `json:"invocation_id"`
		}
		if json.Unmarshal([]byte(f), &m) == nil && m.Type == protocol.TypeInvokeFunction && m.InvocationID != "" {
			waiting[m.InvocationID] = true
		}
		ts.Check(c.Write(dctx, typ, []byte(f)))
	}
	ts.Check(c.Write(dctx, websocket.MessageText, []byte(`{"type":"ping"}`)))
	rctx, rcancel := context.WithTimeout(context.Background(), *timeout)
	defer rcancel()
	pong := false
	for !pong || len(waiting) > 0 {
		_, b, err := c.Read(rctx)
		if err != nil {
			if st := websocket.CloseStatus(err); st >= 0 {
				var ce websocket.CloseError
				reason := ""
				if errors.As(err, &ce) {
					reason = ce.Reason
				}
				fmt.Fprintln(ts.Stdout(), "closed", int(st), reason)
				return
			}
			if rctx.Err() == nil || !pong {
				ts.Fatalf("wsframes: connection ended before pong and every reply (pong %v, waiting for %v): %v", pong, waiting, err)
			}
			for id := range waiting {
				fmt.Fprintln(ts.Stdout(), "noanswer", id)
			}
			break
		}
		var raw struct {
			Type  string `json:"type"`
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &raw) == nil && raw.Type == "error" && raw.Error != nil {
			fmt.Fprintln(ts.Stdout(), "error", raw.Error.Code)
			continue
		}
		m, err := protocol.Decode(b)
		if err != nil {
			ts.Fatalf("wsframes: received %s: %v", b, err)
		}
		switch m.Type {
		case protocol.TypeRegistrationRejected:
			fmt.Fprintln(ts.Stdout(), m.Type, m.Code, m.FunctionID)
		case protocol.TypeTriggerRegistrationResult:
			code := "ok"
			if m.Error != nil {
				code = m.Error.Code
			}
			fmt.Fprintln(ts.Stdout(), m.Type, m.ID, code)
		case protocol.TypeInvocationResult:
			delete(waiting, m.InvocationID)
			res := "ok"
			if m.Error != nil {
				res = m.Error.Code
			}
			fmt.Fprintln(ts.Stdout(), m.Type, m.InvocationID, res)
		default:
			fmt.Fprintln(ts.Stdout(), m.Type)
		}
		pong = pong || m.Type == protocol.TypePong
	}
	if *hold == "" {
		return
	}
	keep = true
	hctx, hcancel := context.WithCancel(context.Background())
	go func() { // read (and drop) until closed, so the connection stays served
		for {
			if _, _, err := c.Read(hctx); err != nil {
				return
			}
		}
	}()
	stop := func() { hcancel(); _ = c.CloseNow() }
	gatesMu.Lock()
	gatesHeld[ts.Getenv("WORK")+"\x00"+*hold] = stop
	gatesMu.Unlock()
	ts.Defer(stop)
}
