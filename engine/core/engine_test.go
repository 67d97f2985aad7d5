package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

func code(err error) string {
	var e *protocol.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestCallRoutesByNamespace(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	enginetest.Worker(t, url, "math", map[string]protocol.Handler{
		"math::add": func(_ context.Context, in json.RawMessage) (any, error) {
			var p struct{ A, B int }
			_ = json.Unmarshal(in, &p)
			return map[string]int{"c": p.A + p.B}, nil
		},
		"math::fail": func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("boom") },
	})
	cl := enginetest.Worker(t, url, "default", nil)
	ctx := context.Background()
	out, err := cl.Call(ctx, "math::add", map[string]int{"a": 2, "b": 3}, protocol.InNamespace("math"))
	if err != nil || string(out) != `{"c":5}` {
		t.Fatalf("got %s, %v", out, err)
	}
	_, err = cl.Call(ctx, "math::add", nil)
	if code(err) != errcode.FunctionNotFound || !strings.Contains(err.Error(), "namespace default") || !strings.Contains(err.Error(), "math") {
		t.Fatalf("not found: %v", err)
	}
	_, err = cl.Call(ctx, "math::fail", nil, protocol.InNamespace("math"))
	if code(err) != errcode.InvocationFailed || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("fail: %v", err)
	}
}

func TestTimeoutAndStopped(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 4)
	slow := enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"slow::wait": func(ctx context.Context, _ json.RawMessage) (any, error) {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
	})
	cl := enginetest.Worker(t, url, "default", nil)
	_, err := cl.Call(context.Background(), "slow::wait", nil, protocol.WithTimeout(100*time.Millisecond))
	if code(err) != errcode.Timeout {
		t.Fatalf("timeout: %v", err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Call(context.Background(), "slow::wait", nil)
		errc <- err
	}()
	<-started // the timed-out call
	<-started
	slow.Close()
	select {
	case err := <-errc:
		if code(err) != errcode.InvocationStopped {
			t.Fatalf("stopped: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("call hung after the worker closed")
	}
}

func TestTokenProtectedNamespace(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	owner := filepath.Join(dir, "owner")
	if err := os.WriteFile(owner, []byte("owner-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := New(Options{Namespaces: map[string]NamespacePolicy{"proj": {TokenFile: tok, OwnerTokenFile: owner}}})
	url := enginetest.Start(t, e).URL
	e.Handle("test::owner", "reports whether the caller holds owner rights", func(_ context.Context, c Caller, _ json.RawMessage) (any, error) {
		return c.Owner, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := protocol.Connect(ctx, protocol.Config{URL: url, Namespace: "proj"})
	if code(err) != errcode.TokenRequired {
		t.Fatalf("no token: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	_ = os.WriteFile(bad, []byte("nope"), 0o600)
	_, err = protocol.Connect(ctx, protocol.Config{URL: url, Namespace: "proj", TokenFile: bad})
	if code(err) != errcode.TokenInvalid || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad token: %v", err)
	}
	// The project token admits the worker but grants no owner rights; the owner token does both.
	for file, wantOwner := range map[string]string{tok: "false", owner: "true"} {
		w, err := protocol.Connect(ctx, protocol.Config{URL: url, Namespace: "proj", TokenFile: file})
		if err != nil {
			t.Fatal(err)
		}
		got, err := w.Call(ctx, "test::owner", nil)
		w.Close()
		if err != nil || string(got) != wantOwner {
			t.Fatalf("token %s: owner = %s, %v; want %s", filepath.Base(file), got, err, wantOwner)
		}
	}
}

// TestEngineOwnerCredential: an engine with no protected namespaces grants
// owner rights to the connection presenting its owner credential, and to no other (none, or
// another token); everyone is still admitted.
func TestEngineOwnerCredential(t *testing.T) {
	dir := t.TempDir()
	cred := filepath.Join(dir, "cred")
	other := filepath.Join(dir, "other")
	_ = os.WriteFile(cred, []byte("engine-owner\n"), 0o600)
	_ = os.WriteFile(other, []byte("someone-else\n"), 0o600)
	t.Setenv(protocol.EnvTokenFile, "")
	t.Setenv(protocol.EnvToken, "")
	e := New(Options{OwnerTokenFile: cred})
	url := enginetest.Start(t, e).URL
	e.Handle("test::owner", "reports whether the caller holds owner rights", func(_ context.Context, c Caller, _ json.RawMessage) (any, error) {
		return c.Owner, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for file, wantOwner := range map[string]string{"": "false", other: "false", cred: "true"} {
		w, err := protocol.Connect(ctx, protocol.Config{URL: url, TokenFile: file})
		if err != nil {
			t.Fatal(err)
		}
		got, err := w.Call(ctx, "test::owner", nil)
		w.Close()
		if err != nil || string(got) != wantOwner {
			t.Fatalf("token file %q: owner = %s, %v; want %s", file, got, err, wantOwner)
		}
	}
}

// TestTokenFromEnvironment: a worker with no token file presents $III_TOKEN of the environment
// its main hands down (Config.FromEnv) as its bearer token, as 0.26 SDKs do; a token file, when
// named, wins.
func TestTokenFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("env-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := enginetest.Start(t, New(Options{Namespaces: map[string]NamespacePolicy{"proj": {TokenFile: tok}}})).URL
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	env := func(token string) func(string) string {
		return func(k string) string { return map[string]string{protocol.EnvToken: token}[k] }
	}
	w, err := protocol.Connect(ctx, protocol.Config{URL: url, Namespace: "proj"}.FromEnv(env("env-token")))
	if err != nil {
		t.Fatalf("III_TOKEN: %v", err)
	}
	w.Close()
	bad := filepath.Join(dir, "bad")
	_ = os.WriteFile(bad, []byte("nope"), 0o600)
	if _, err := protocol.Connect(ctx, protocol.Config{URL: url, Namespace: "proj", TokenFile: bad}.FromEnv(env("env-token"))); code(err) != errcode.TokenInvalid {
		t.Fatalf("a token file wins over III_TOKEN: %v", err)
	}
	if _, err := protocol.Connect(ctx, protocol.Config{URL: url, Namespace: "proj"}.FromEnv(env("wrong"))); code(err) != errcode.TokenInvalid {
		t.Fatalf("wrong III_TOKEN: %v", err)
	}
}

func TestVoidCall(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	got := make(chan string, 1)
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"sink::put": func(_ context.Context, in json.RawMessage) (any, error) {
			got <- string(in)
			return nil, nil
		},
	})
	cl := enginetest.Worker(t, url, "default", nil)
	if err := cl.CallVoid(context.Background(), "sink::put", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case in := <-got:
		if in != `{"n":1}` {
			t.Fatalf("payload %s", in)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("void call never arrived")
	}
}

// TestParkedRegistrationsFallBackToDefault: functions registered by a client that never calls
// engine::workers::register become live in default once the grace period ends.
func TestParkedRegistrationsFallBackToDefault(t *testing.T) {
	e := New(Options{Grace: 50 * time.Millisecond})
	url := enginetest.Start(t, e).URL
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	go func() {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	}()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"registerfunction","id":"raw::fn"}`)); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := e.Lookup("default", "raw::fn"); ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("parked registration never applied")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestReservedAndConflictingRegistrations(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	e.Handle("engine::builtin", "", func(context.Context, Caller, json.RawMessage) (any, error) { return "engine", nil })
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"a::b":             func(context.Context, json.RawMessage) (any, error) { return 1, nil },
		"engine::builtin":  func(context.Context, json.RawMessage) (any, error) { return 1, nil },
		"sandbox::create":  func(context.Context, json.RawMessage) (any, error) { return 1, nil },
		"configuration::x": func(context.Context, json.RawMessage) (any, error) { return 1, nil },
	})
	first, _ := e.Lookup("default", "a::b")
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"a::b": func(context.Context, json.RawMessage) (any, error) { return 2, nil },
	})
	if owner, _ := e.Lookup("default", "a::b"); owner != first {
		t.Error("a second worker took over a::b")
	}
	for _, id := range []string{"engine::builtin", "sandbox::create", "configuration::x"} {
		if _, ok := e.Lookup("default", id); ok {
			t.Errorf("%s registered by a worker", id)
		}
	}
}

// A compose::* call no daemon serves says no project runs there; compose::add also says it has
// nothing to edit and what to write instead (req E6).
func TestComposeNotFoundExplains(t *testing.T) {
	e := &Engine{funcs: map[fkey]*fnEntry{}}
	add := e.notFound("default", "compose::add").Message
	for _, want := range []string{"Function compose::add not found in namespace default.", "No Compose project runs in namespace default",
		"compose::add has nothing to edit: it only edits a compose file that exists", "Write a worker-compose.yaml",
		"package://sandbox-libkrun", "iii compose --up -n default"} {
		if !strings.Contains(add, want) {
			t.Errorf("compose::add: %q lacks %q", add, want)
		}
	}
	if up := e.notFound("shop", "compose::up").Message; !strings.Contains(up, "No Compose project runs in namespace shop") || strings.Contains(up, "nothing to edit") {
		t.Errorf("compose::up: %q", up)
	}
	if other := e.notFound("default", "demo::run").Message; other != "Function demo::run not found in namespace default." {
		t.Errorf("demo::run: %q", other)
	}
}

// TestQueuedFramesLeaveBeforeClose: the SDK writes frames from a queue; frames sent before
// Close (here void calls, which wait for nothing) still reach the engine.
func TestQueuedFramesLeaveBeforeClose(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	var mu sync.Mutex
	var got []int
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{"count::hit": func(_ context.Context, in json.RawMessage) (any, error) {
		var n int
		_ = json.Unmarshal(in, &n)
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
		return nil, nil
	}})
	caller := protocol.NewWorker(protocol.Config{URL: url, Name: "voids"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := caller.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		if err := caller.CallVoid(ctx, "count::hit", i); err != nil {
			t.Fatal(err)
		}
	}
	caller.Close()
	k := 0
	all := func() bool {
		mu.Lock()
		defer mu.Unlock()
		k = len(got)
		return k == n
	}
	if !enginetest.Poll(20*time.Second, all) {
		t.Fatalf("%d of %d void calls sent before Close arrived", k, n)
	}
}

// TestInvokeResultsOutliveReadBuffer: the engine reads a worker's results into a buffer it
// reuses for the next frame, forwarding them without a copy; a result the engine itself awaits
// (Invoke) must still be its own bytes once later results have been read.
func TestInvokeResultsOutliveReadBuffer(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"echo::back": func(_ context.Context, in json.RawMessage) (any, error) { return in, nil },
	})
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := `{"n":` + strings.Repeat("1", i+1) + `}`
			for range 20 {
				got, perr := e.Invoke(context.Background(), "default", "echo::back", json.RawMessage(want), 5*time.Second)
				if perr != nil || string(got) != want {
					errs <- fmt.Sprintf("got %s (%v), want %s", got, perr, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}

// A registerfunction with an invocation (iii's HTTP-invoked function) whose URL the default
// security refuses (http, loopback) is refused with HTTP_URL_REFUSED and not registered, instead
// of routing its calls back to a socket that never answers them (review N7, row B33). The other
// fields iii-sdk 0.22 sends (description, request_format, response_format, metadata) and a null
// invocation register as before.
func TestHTTPInvokedFunctionIsRefused(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for _, f := range []string{
		`{"type":"registerfunction","id":"x::h","description":"hook","invocation":{"url":"http://127.0.0.1:9/hook","method":"POST","timeout_ms":1000}}`,
		`{"type":"registerfunction","id":"x::sdk","description":"d","request_format":{"type":"object"},"response_format":{"type":"object"},"metadata":{"team":"a"}}`,
		`{"type":"registerfunction","id":"x::null","invocation":null}`,
		`{"type":"invokefunction","invocation_id":"r1","function_id":"engine::workers::register","data":{"name":"raw","namespace":"default"}}`,
	} {
		if err := c.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	var rejected []*protocol.Message
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("no reply to engine::workers::register: %v", err)
		}
		m, err := protocol.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if m.Type == protocol.TypeRegistrationRejected {
			rejected = append(rejected, m)
		}
		if m.Type == protocol.TypeInvocationResult && m.InvocationID == "r1" {
			break
		}
	}
	if len(rejected) != 1 {
		t.Fatalf("%d registrationrejected frames, want 1: %+v", len(rejected), rejected)
	}
	if r := rejected[0]; r.Code != errcode.HTTPURLRefused || r.FunctionID != "x::h" || r.NamespaceOr("") != "default" || r.OwnerWorkerID != "engine" {
		t.Errorf("rejection: %+v", r)
	}
	if _, ok := e.Lookup("default", "x::h"); ok {
		t.Error("the HTTP-invoked function was registered")
	}
	for _, id := range []string{"x::sdk", "x::null"} {
		if _, ok := e.Lookup("default", id); !ok {
			t.Errorf("%s was not registered", id)
		}
	}
}
