// Command fakeadapter is a test-only worker. As a sandbox adapter (the default role) it registers
// <prefix>::<op> for every sandbox contract operation plus <prefix>::adapter::info in
// $III_NAMESPACE. With FAKE_ROLE=worker it serves test::* functions instead; with
// FAKE_ROLE=provider it provides the trigger type "fake" (see registerProvider).
//
// Environment:
//
//	FAKE_PREFIX    adapter function prefix (default sandbox-libkrun)
//	FAKE_MODE      echo (default: reply with the op and the request as received),
//	               error (reply with an S002 envelope), slow (never reply; touch FAKE_MARK first)
//	FAKE_CONTRACT  contract reported by adapter::info, "1.1" (default), "1.0" or e.g. "2.0"
//	FAKE_INFO      silent: adapter::info never answers
//	FAKE_MARK      file created when a call arrives (slow mode, test::slow)
//	FAKE_NAME      the worker name to register under instead of $III_WORKER_NAME
//	FAKE_STRAY_NS  first connect a second worker in this namespace serving stray::fn
//	FAKE_ROLE      adapter (default), worker (test::echo, test::fail, test::slow, test::call,
//	               test::log ({lines, stream, prefix, first}: write "<prefix> <n>" lines, n from
//	               first, default "line" from 1, to stdout or stderr)), provider (trigger type
//	               "fake", fake::active, fake::fire) or subscriber (sub::on-message, sub::on-tick,
//	               sub::publish; see registerSubscriber)
//
// It exits 1 with the engine's error when the engine refuses its registration.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

var ops = []string{
	"create", "exec", "run", "list", "stop", "catalog::list",
	"fs::ls", "fs::stat", "fs::mkdir", "fs::write", "fs::read", "fs::rm", "fs::chmod", "fs::mv", "fs::grep", "fs::sed",
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func mark() {
	if f := os.Getenv("FAKE_MARK"); f != "" {
		_ = os.WriteFile(f, nil, 0o644)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, orphaned := context.WithCancel(ctx)
	go exitWithParent(orphaned)
	if ns := os.Getenv("FAKE_STRAY_NS"); ns != "" {
		stray := protocol.NewWorker(protocol.Config{Name: env("III_WORKER_NAME", "fakeadapter") + "-stray", Namespace: ns, Version: "0.0.0-fake"}.FromEnv(os.Getenv))
		_ = stray.Register("stray::fn", func(context.Context, json.RawMessage) (any, error) { return "stray", nil })
		if err := stray.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "fakeadapter: stray worker:", err)
			os.Exit(1)
		}
		defer stray.Close()
	}
	w := protocol.NewWorker(protocol.Config{Name: env("FAKE_NAME", env("III_WORKER_NAME", "fakeadapter")), Version: "0.0.0-fake"}.FromEnv(os.Getenv))
	switch env("FAKE_ROLE", "adapter") {
	case "worker":
		registerWorker(w)
	case "provider":
		registerProvider(w)
	case "subscriber":
		registerSubscriber(w)
	default:
		registerAdapter(w)
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fakeadapter:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "fakeadapter: registered in namespace", w.Namespace())
	select {
	case <-ctx.Done():
	case <-w.Done():
		if err := w.Err(); err != nil {
			fmt.Fprintln(os.Stderr, "fakeadapter:", err)
			os.Exit(1)
		}
	}
	w.Close()
}

// exitWithParent cancels when the process that started this one is gone, so a test run that
// dies never leaves a fake adapter behind.
func exitWithParent(cancel context.CancelFunc) {
	parent := os.Getppid()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != parent {
			cancel()
			return
		}
	}
}

func registerAdapter(w *protocol.Worker) {
	prefix := env("FAKE_PREFIX", "sandbox-libkrun")
	mode := env("FAKE_MODE", "echo")
	major, minor, _ := strings.Cut(env("FAKE_CONTRACT", "1.1"), ".")
	maj, _ := strconv.Atoi(major)
	mnr, _ := strconv.Atoi(minor)
	_ = w.Register(prefix+"::adapter::info", func(ctx context.Context, _ json.RawMessage) (any, error) {
		if os.Getenv("FAKE_INFO") == "silent" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return map[string]any{"adapter": prefix, "adapter_version": "0.0.0-fake", "contract": map[string]int{"major": maj, "minor": mnr}}, nil
	})
	for _, op := range ops {
		_ = w.Register(prefix+"::"+op, func(ctx context.Context, in json.RawMessage) (any, error) {
			switch mode {
			case "slow":
				mark()
				<-ctx.Done()
				return nil, ctx.Err()
			case "error":
				return nil, protocol.RawError(json.RawMessage(`{"type":"validation","code":"S002","message":"sandbox not found: 00000000-0000-4000-8000-000000000000","docs_url":"https://iii.dev/docs/using-iii/sandboxes#s002","retryable":false,"fix":null,"fix_note":"from the fake adapter","adapter_extra":{"op":"` + op + `"}}`))
			}
			reply := map[string]any{"op": op, "adapter": prefix, "namespace": w.Namespace(), "request": json.RawMessage(in), "request_raw": string(in)}
			if op == "exec" || op == "run" {
				reply["stdout"], reply["stderr"], reply["exit_code"], reply["timed_out"], reply["duration_ms"], reply["success"] = "", "", 0, false, 1, true
				if mnr >= 1 || maj > 1 {
					var req struct {
						Truncate bool `json:"truncate"`
					}
					_ = json.Unmarshal(in, &req)
					reply["stdout_truncated"], reply["stderr_truncated"] = req.Truncate, false
				}
			}
			return reply, nil
		})
	}
}

func registerWorker(w *protocol.Worker) {
	_ = w.Register("test::echo", func(_ context.Context, in json.RawMessage) (any, error) {
		return map[string]any{"echo": in, "namespace": w.Namespace()}, nil
	}, protocol.WithDescription("Echo the payload"))
	_ = w.Register("test::fail", func(context.Context, json.RawMessage) (any, error) {
		return nil, errors.New("test::fail failed on purpose")
	})
	_ = w.Register("test::slow", func(ctx context.Context, _ json.RawMessage) (any, error) {
		mark()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	_ = w.Register("test::log", func(_ context.Context, in json.RawMessage) (any, error) {
		var req struct {
			Lines  int    `json:"lines"`
			Stream string `json:"stream"`
			Prefix string `json:"prefix"`
			First  int    `json:"first"`
		}
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, err
		}
		out := os.Stdout
		if req.Stream == "stderr" {
			out = os.Stderr
		}
		if req.Prefix == "" {
			req.Prefix = "line"
		}
		if req.First == 0 {
			req.First = 1
		}
		for i := req.First; i < req.First+req.Lines; i++ {
			fmt.Fprintf(out, "%s %d\n", req.Prefix, i)
		}
		return map[string]any{"written": req.Lines}, nil
	}, protocol.WithDescription("Write lines to stdout or stderr"))
	_ = w.Register("test::call", func(ctx context.Context, in json.RawMessage) (any, error) {
		var req struct {
			Function  string          `json:"function"`
			Namespace string          `json:"namespace"`
			Payload   json.RawMessage `json:"payload"`
			Enqueue   string          `json:"enqueue"` // a queue: call with action enqueue
		}
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, err
		}
		var opts []protocol.CallOption
		if req.Namespace != "" {
			opts = append(opts, protocol.InNamespace(req.Namespace))
		}
		if req.Enqueue != "" {
			opts = append(opts, protocol.Enqueue(req.Enqueue))
		}
		out, err := w.Call(ctx, req.Function, req.Payload, opts...)
		if err != nil {
			return nil, err
		}
		return map[string]any{"via": "go", "result": out}, nil
	})
}

// fakeTriggers is the provider side of trigger type "fake": it refuses a config with
// "refuse": true (code FAKE_REFUSED) and keeps the others until they are unregistered.
type fakeTriggers struct {
	mu     sync.Mutex
	active map[string]protocol.Trigger
}

func (f *fakeTriggers) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	var cfg struct {
		Refuse bool `json:"refuse"`
	}
	_ = json.Unmarshal(t.Config, &cfg)
	if cfg.Refuse {
		return protocol.NewError("FAKE_REFUSED", "the fake provider refuses this config on purpose")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active[t.ID] = t
	return nil
}

func (f *fakeTriggers) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.active, t.ID)
	return nil
}

// registerProvider serves trigger type "fake", fake::active ({count, ids}) and fake::fire,
// which calls the function of every active trigger with {trigger_id, config} (and the
// trigger's metadata) and answers {results: [{trigger_id, function_id, result|error}]}.
func registerProvider(w *protocol.Worker) {
	f := &fakeTriggers{active: map[string]protocol.Trigger{}}
	_ = w.RegisterTriggerType("fake", "Fires when fake::fire is called", f)
	list := func() []protocol.Trigger {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := make([]protocol.Trigger, 0, len(f.active))
		for _, t := range f.active {
			out = append(out, t)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out
	}
	_ = w.Register("fake::active", func(context.Context, json.RawMessage) (any, error) {
		ts := list()
		ids := make([]string, 0, len(ts))
		for _, t := range ts {
			ids = append(ids, t.ID)
		}
		return map[string]any{"count": len(ts), "ids": ids}, nil
	})
	_ = w.Register("fake::fire", func(ctx context.Context, _ json.RawMessage) (any, error) {
		results := []map[string]any{}
		for _, t := range list() {
			r := map[string]any{"trigger_id": t.ID, "function_id": t.FunctionID}
			out, err := w.Call(ctx, t.FunctionID, map[string]any{"trigger_id": t.ID, "config": t.Config}, t.CallOptions()...)
			if err != nil {
				r["error"] = protocol.AsError(err)
			} else {
				r["result"] = out
			}
			results = append(results, r)
		}
		return map[string]any{"results": results}, nil
	})
}

// registerSubscriber serves sub::on-message (appends the message's "id" to $FAKE_SEEN_FILE,
// after $FAKE_DELAY_MS), sub::on-tick (appends the tick's scheduled_time to $FAKE_TICK_FILE)
// and sub::publish {topic, n} (publishes {id: "m<i>"} for i < n through queue::publish), and
// registers a queue trigger {topic: $FAKE_TOPIC} and a cron trigger {expression: $FAKE_CRON}
// for the ones that are set.
func registerSubscriber(w *protocol.Worker) {
	var mu sync.Mutex
	appendLine := func(file, line string) error {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintln(f, line)
		return err
	}
	delay, _ := strconv.Atoi(os.Getenv("FAKE_DELAY_MS"))
	_ = w.Register("sub::on-message", func(_ context.Context, in json.RawMessage) (any, error) {
		var m struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(in, &m)
		time.Sleep(time.Duration(delay) * time.Millisecond)
		return nil, appendLine(os.Getenv("FAKE_SEEN_FILE"), m.ID)
	})
	_ = w.Register("sub::on-tick", func(_ context.Context, in json.RawMessage) (any, error) {
		var t struct {
			ScheduledTime string `json:"scheduled_time"`
		}
		_ = json.Unmarshal(in, &t)
		return nil, appendLine(os.Getenv("FAKE_TICK_FILE"), t.ScheduledTime)
	})
	_ = w.Register("sub::publish", func(ctx context.Context, in json.RawMessage) (any, error) {
		var req struct {
			Topic string `json:"topic"`
			N     int    `json:"n"`
		}
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, err
		}
		for i := range min(req.N, 10000) {
			if _, err := w.Call(ctx, "queue::publish", map[string]any{"topic": req.Topic, "data": map[string]string{"id": fmt.Sprintf("m%d", i)}}); err != nil {
				return nil, err
			}
		}
		return map[string]int{"published": req.N}, nil
	})
	if t := os.Getenv("FAKE_TOPIC"); t != "" {
		_, _ = w.RegisterTrigger("queue", "sub::on-message", map[string]any{"topic": t})
	}
	if c := os.Getenv("FAKE_CRON"); c != "" {
		_, _ = w.RegisterTrigger("cron", "sub::on-tick", map[string]any{"expression": c})
	}
}
