package testscripts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

func init() {
	registerBinary(binary{name: "fakeadapter", pkg: "./testscripts/internal/fakeadapter", version: "0.0.0-test"})
	registerCmd("waitfn", cmdWaitFn)
	registerCmd("wsprobe", cmdWSProbe)
	registerCond("node", func() (bool, error) {
		if nodeModules() != "" {
			return true, nil
		}
		return ciCond("Node SDK", nodeSkipReason)
	})
	registerSetup(func(env *testscript.Env) error {
		if dir := nodeModules(); dir != "" {
			env.Setenv("NODE_PATH", dir)
		}
		env.Setenv("NODE_SKIP_REASON", nodeSkipReason)
		return nil
	})
}

// waitfn [-timeout=15s] [-n NS] FN...: poll engine::functions::list at $III_URL until every FN
// is registered in NS (default "default"); ! waitfn: until none is.
func cmdWaitFn(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("waitfn", flag.ContinueOnError)
	d := fs.Duration("timeout", 15*time.Second, "")
	ns := fs.String("n", protocol.DefaultNamespace, "")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		ts.Fatalf("usage: waitfn [-timeout=D] [-n NS] FN...")
	}
	url := ts.Getenv("III_URL")
	if url == "" {
		ts.Fatalf("waitfn: III_URL is not set")
	}
	var last string
	ok := enginetest.Poll(*d, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "waitfn", Namespace: protocol.DefaultNamespace, NoReconnect: true, TokenFile: os.DevNull})
		if err != nil {
			last = err.Error()
			return false
		}
		defer w.Close()
		out, err := w.Call(ctx, protocol.FnListFunctions, map[string]string{"namespace": *ns})
		if err != nil {
			last = err.Error()
			return false
		}
		var res struct {
			Functions []struct {
				FunctionID string `json:"function_id"`
			} `json:"functions"`
		}
		_ = json.Unmarshal(out, &res)
		have := map[string]bool{}
		for _, f := range res.Functions {
			have[f.FunctionID] = true
		}
		for _, fn := range fs.Args() {
			if have[fn] == neg {
				last = fn
				return false
			}
		}
		return true
	})
	if !ok {
		ts.Fatalf("waitfn: %v not in the expected state in namespace %s after %v (last: %s)", fs.Args(), *ns, *d, last)
	}
}

// wsprobe URL [FRAME...]: open a raw WebSocket to the engine and send undecodable JSON, a frame
// of an unknown type and a binary telemetry frame, or the FRAMEs given, then a ping; print each
// frame received until the pong and a reply to every invokefunction sent with an invocation_id
// ("pong" on stdout proves the connection survived). A registrationrejected prints as
// "registrationrejected CODE FUNCTION_ID", an invocationresult as "invocationresult ID ok|CODE".
func cmdWSProbe(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: wsprobe URL [FRAME...]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, args[0], nil)
	ts.Check(err)
	defer c.CloseNow()
	frames := args[1:]
	if len(frames) == 0 {
		frames = []string{`{"type":`, `not json at all`, `{"type":"frobnicate","x":1}`, `{"no_type":true}`}
	}
	waiting := map[string]bool{}
	for _, f := range frames {
		var m struct {
			Type         string `json:"type"`
			InvocationID string `json:"invocation_id"`
		}
		if json.Unmarshal([]byte(f), &m) == nil && m.Type == protocol.TypeInvokeFunction && m.InvocationID != "" {
			waiting[m.InvocationID] = true
		}
		ts.Check(c.Write(ctx, websocket.MessageText, []byte(f)))
	}
	if len(args) == 1 {
		ts.Check(c.Write(ctx, websocket.MessageBinary, []byte("OTLP{}")))
	}
	ts.Check(c.Write(ctx, websocket.MessageText, []byte(`{"type":"ping"}`)))
	pong := false
	for !pong || len(waiting) > 0 {
		_, b, err := c.Read(ctx)
		if err != nil {
			ts.Fatalf("wsprobe: connection ended before pong and every reply (pong %v, waiting for %v): %v", pong, waiting, err)
		}
		m, err := protocol.Decode(b)
		if err != nil {
			ts.Fatalf("wsprobe: engine sent %s: %v", b, err)
		}
		switch m.Type {
		case protocol.TypeRegistrationRejected:
			fmt.Fprintln(ts.Stdout(), m.Type, m.Code, m.FunctionID)
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
}

var (
	nodeOnce       sync.Once
	nodeDir        string
	nodeSkipReason = "node worker not installed"
)

// nodeModules installs testdata/node (iii-sdk@0.22.1) with npm once per run into a cache
// directory keyed by the lock file and returns its node_modules, or "" with nodeSkipReason set.
func nodeModules() string {
	nodeOnce.Do(func() {
		npm, err := exec.LookPath("npm")
		if err != nil {
			nodeSkipReason = "npm is not installed; the Node interop scenario needs it"
			return
		}
		if _, err := exec.LookPath("node"); err != nil {
			nodeSkipReason = "node is not installed; the Node interop scenario needs it"
			return
		}
		src := filepath.Join(repoRoot, "testscripts", "testdata", "node")
		lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
		if err != nil {
			nodeSkipReason = "reading package-lock.json: " + err.Error()
			return
		}
		sum := sha256.Sum256(lock)
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir := filepath.Join(base, "iii-e2e-node", hex.EncodeToString(sum[:8]))
		mods := filepath.Join(dir, "node_modules")
		if _, err := os.Stat(filepath.Join(mods, "iii-sdk", "package.json")); err == nil {
			nodeDir, nodeSkipReason = mods, ""
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			nodeSkipReason = err.Error()
			return
		}
		for _, f := range []string{"package.json", "package-lock.json"} {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, f), b, 0o644)
			}
			if err != nil {
				nodeSkipReason = err.Error()
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeSkipReason = "npm ci of iii-sdk@0.22.1 failed: " + strings.TrimSpace(lastLines(string(out), 5))
			return
		}
		nodeDir = mods
		nodeSkipReason = ""
	})
	return nodeDir
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
