// Command iii-demo-worker is the worker of the fixtures/demo project (`go tool mage demo`). Started
// by Compose, it registers demo::result, then runs a python snippet through sandbox::run, that is
// inside a microVM of the sandbox adapter, and keeps the outcome for demo::result to report.
//
// demo::result takes {"wait_ms": N}: it answers as soon as the job is done, or after N ms with
// status "running". The reply is {"status": "running"|"done"|"failed", "stdout",
// "stderr", "exit_code", "success", "duration_ms", "error"}.
//
// Environment: III_URL, III_NAMESPACE, III_WORKER_NAME, III_TOKEN_FILE (set by Compose).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

// Snippet is the python code the worker runs in the sandbox: the guest's kernel release, a value
// computed in the VM, and the interpreter's version.
const Snippet = `import os, platform, sys
print("guest kernel:", platform.release())
print("machine:", platform.machine(), "| cpus:", os.cpu_count())
print("sum of i*i for i in 1..1000:", sum(i * i for i in range(1, 1001)))
print("python:", " ".join(sys.version.split()))
`

// runTimeout bounds the sandbox::run call: a VM boot under TCG on a busy host plus the snippet.
const runTimeout = 5 * time.Minute

// maxWait caps how long one demo::result call waits for the job: past runTimeout it is over.
const maxWait = runTimeout + 30*time.Second

// Result is what demo::result answers.
type Result struct {
	Status     string `json:"status"`
	Stdout     string `json:"stdout,omitempty"`
	Stderr     string `json:"stderr,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Success    bool   `json:"success"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	Error      string `json:"error,omitempty"`
}

// job holds the outcome of the one sandbox::run the worker makes.
type job struct {
	mu   sync.Mutex
	res  Result
	done chan struct{}
}

func newJob() *job { return &job{res: Result{Status: "running"}, done: make(chan struct{})} }

func (j *job) finish(r Result) {
	j.mu.Lock()
	j.res = r
	j.mu.Unlock()
	close(j.done)
}

func (j *job) result() Result {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.res
}

// handle serves demo::result.
func (j *job) handle(ctx context.Context, payload json.RawMessage) (any, error) {
	var in struct {
		WaitMS int64 `json:"wait_ms"`
	}
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &in); err != nil {
			return nil, protocol.NewError("invalid_payload", "demo::result takes {\"wait_ms\": N}: %v", err)
		}
	}
	wait := min(time.Duration(in.WaitMS)*time.Millisecond, maxWait)
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-j.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return j.result(), nil
}

// run calls sandbox::run with Snippet and records the outcome.
func (j *job) run(ctx context.Context, w *protocol.Worker, log *slog.Logger) {
	start := time.Now()
	log.Info("calling sandbox::run", "lang", "python", "image", "python")
	raw, err := w.Call(ctx, "sandbox::run", map[string]any{"image": "python", "lang": "python", "code": Snippet},
		protocol.WithTimeout(runTimeout))
	if err != nil {
		log.Error("sandbox::run failed", "err", err)
		j.finish(Result{Status: "failed", Error: "sandbox::run: " + err.Error(), DurationMS: time.Since(start).Milliseconds()})
		return
	}
	var out struct {
		Stdout     string `json:"stdout"`
		Stderr     string `json:"stderr"`
		ExitCode   *int   `json:"exit_code"`
		Success    bool   `json:"success"`
		DurationMS int64  `json:"duration_ms"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		j.finish(Result{Status: "failed", Error: fmt.Sprintf("sandbox::run reply: %v", err)})
		return
	}
	log.Info("sandbox::run done", "exit_code", out.ExitCode, "took", time.Since(start).Round(time.Millisecond))
	j.finish(Result{Status: "done", Stdout: out.Stdout, Stderr: out.Stderr, ExitCode: out.ExitCode,
		Success: out.Success, DurationMS: time.Since(start).Milliseconds()})
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := protocol.NewWorker(protocol.Config{Description: "iii-go demo: runs a python snippet in a sandbox microVM", Logger: log}.FromEnv(os.Getenv))
	j := newJob()
	if err := w.Register("demo::result", j.handle, protocol.WithDescription("the outcome of the demo's sandbox::run; {\"wait_ms\": N} waits for it")); err != nil {
		log.Error("register demo::result", "err", err)
		os.Exit(1)
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := w.Start(startCtx)
	cancel()
	if err != nil {
		log.Error("cannot join the engine", "err", err)
		os.Exit(1)
	}
	go j.run(ctx, w, log)
	select {
	case <-ctx.Done():
	case <-w.Done():
		log.Error("connection to the engine closed", "err", w.Err())
	}
	w.Close()
}
