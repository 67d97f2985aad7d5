// Command fakeadapter is a test-only worker. As a sandbox adapter (the default role) it registers
// <prefix>::<op> for every sandbox contract operation plus <prefix>::adapter::info in
// $III_NAMESPACE. With FAKE_ROLE=worker it serves test::* functions instead.
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
//	FAKE_ROLE      adapter (default) or worker: test::echo, test::fail, test::slow, test::call,
//	               test::log ({lines, stream, prefix, first}: write "<prefix> <n>" lines, n from
//	               first, default "line" from 1, to stdout or stderr)
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
	"strconv"
	"strings"
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
		stray := protocol.NewWorker(protocol.Config{Name: env("III_WORKER_NAME", "fakeadapter") + "-stray", Namespace: ns, Version: "0.0.0-fake"})
		_ = stray.Register("stray::fn", func(context.Context, json.RawMessage) (any, error) { return "stray", nil })
		if err := stray.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "fakeadapter: stray worker:", err)
			os.Exit(1)
		}
		defer stray.Close()
	}
	w := protocol.NewWorker(protocol.Config{Name: env("FAKE_NAME", env("III_WORKER_NAME", "fakeadapter")), Version: "0.0.0-fake"})
	if env("FAKE_ROLE", "adapter") == "worker" {
		registerWorker(w)
	} else {
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
		}
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, err
		}
		var opts []protocol.CallOption
		if req.Namespace != "" {
			opts = append(opts, protocol.InNamespace(req.Namespace))
		}
		out, err := w.Call(ctx, req.Function, req.Payload, opts...)
		if err != nil {
			return nil, err
		}
		return map[string]any{"via": "go", "result": out}, nil
	})
}
