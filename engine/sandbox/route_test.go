package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/iii-go/iii/engine/enginetest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/errcode"
)

// spans is a core.Observer that records the engine's spans.
type spans struct {
	mu  sync.Mutex
	got []core.Call
}

func (s *spans) StartCall(c core.Call) (string, func(*protocol.Error)) {
	s.mu.Lock()
	s.got = append(s.got, c)
	s.mu.Unlock()
	return "", nil
}
func (*spans) Telemetry(string, string, []byte) {}
func (*spans) FunctionsChanged()                {}
func (*spans) WorkerRegistered(string)          {}

// take returns the spans of sandbox::* and of the adapter's operations (not adapter::info,
// nor the engine's own functions) recorded since the last take, as "function@worker".
func (s *spans) take(adapterID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.got {
		if strings.HasSuffix(c.FunctionID, "::adapter::info") || strings.HasPrefix(c.FunctionID, "engine::") {
			continue
		}
		w := c.WorkerID
		if w == adapterID && w != "" {
			w = "adapter"
		}
		out = append(out, c.FunctionID+"@"+w)
	}
	s.got = nil
	return out
}

// observed serves an engine with the router bound to b (unbound when nil) and a span recorder.
func observed(t *testing.T, b *Binding) (string, *spans) {
	t.Helper()
	e := core.New(core.Options{})
	s := &spans{}
	e.SetObserver(s)
	New(e, b).Install()
	return enginetest.Start(t, e).URL, s
}

// op serves one adapter operation.
type op = protocol.Handler

// fakeAdapter connects an adapter of contract c in namespace default serving ops.
func fakeAdapter(t *testing.T, url string, c Contract, ops map[string]op) *protocol.Worker {
	t.Helper()
	w := protocol.NewWorker(protocol.Config{URL: url, Name: "adapter"})
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Register(DefaultAdapter+"::adapter::info", func(context.Context, json.RawMessage) (any, error) {
		return map[string]any{"adapter": DefaultAdapter, "contract": c}, nil
	}))
	for name, fn := range ops {
		must(w.Register(DefaultAdapter+"::"+name, fn))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(w.Start(ctx))
	t.Cleanup(func() { w.Close() })
	return w
}

func caller(t *testing.T, url string) *protocol.Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "caller", NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// outcome is one call's answer: its result bytes, or its error's code, message and whole
// object.
func outcomeOf(res json.RawMessage, err error) string {
	if err == nil {
		return "result " + string(res)
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return "error " + err.Error()
	}
	return "error " + pe.Code + ": " + pe.Message + " " + string(pe.Raw())
}

// workerID is the id the engine gave w's connection.
func workerID(t *testing.T, c *protocol.Worker, name string) string {
	t.Helper()
	res, err := c.Call(context.Background(), protocol.FnListWorkers, map[string]any{"search": name})
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Workers []struct{ ID, Name string } }
	_ = json.Unmarshal(res, &out)
	for _, w := range out.Workers {
		if w.Name == name {
			return w.ID
		}
	}
	t.Fatalf("no worker %s in %s", name, res)
	return ""
}

// TestRoutedCallsAnswerAsForwardedOnes: the first call of an adapter connection goes through
// the forwarder (which asks adapter::info), later ones take the fast path straight to the
// adapter. Both answer byte for byte alike, replies and errors: an adapter's S-code, the
// timeout, a 1.0 adapter's truncation flags, a 1.1 adapter's flags as it set them; each call
// is one span, the fast one naming the adapter's connection. The router's own errors (S302,
// S303, S301) never take the fast path.
func TestRoutedCallsAnswerAsForwardedOnes(t *testing.T) {
	bound := &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"}
	v11, v10 := Contract{Major: 1, Minor: 1}, Contract{Major: 1, Minor: 0}
	reply := func(v string) op {
		return func(context.Context, json.RawMessage) (any, error) { return json.RawMessage(v), nil }
	}
	slow := func(ctx context.Context, _ json.RawMessage) (any, error) {
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
		return json.RawMessage(`{}`), nil
	}
	cases := []struct {
		name     string
		binding  *Binding
		contract *Contract // nil: no adapter
		fn       string
		ops      map[string]op
		timeout  time.Duration
		want     string // the outcome, a prefix of it for errors
		fast     bool   // the second call takes the fast path
	}{
		{name: "1.1 reply unchanged", binding: bound, contract: &v11, fn: "exec", ops: map[string]op{"exec": reply(`{"stdout":"a<b>",  "stdout_truncated":true,"stderr_truncated":false}`)},
			want: `result {"stdout":"a<b>",  "stdout_truncated":true,"stderr_truncated":false}`, fast: true},
		{name: "1.0 exec gets the flags", binding: bound, contract: &v10, fn: "exec", ops: map[string]op{"exec": reply(`{"stdout":"a","exit_code":0}`)},
			want: `result {"stdout":"a","exit_code":0,"stdout_truncated":false,"stderr_truncated":false}`, fast: true},
		{name: "1.0 run keeps a flag set", binding: bound, contract: &v10, fn: "run", ops: map[string]op{"run": reply(`{"stderr_truncated":true}`)},
			want: `result {"stderr_truncated":true,"stdout_truncated":false}`, fast: true},
		{name: "1.0 list untouched", binding: bound, contract: &v10, fn: "list", ops: map[string]op{"list": reply(`{"sandboxes":[]}`)},
			want: `result {"sandboxes":[]}`, fast: true},
		{name: "adapter S-code passes", binding: bound, contract: &v11, fn: "exec", ops: map[string]op{"exec": func(context.Context, json.RawMessage) (any, error) {
			return nil, protocol.RawError(json.RawMessage(`{"type":"validation","code":"S002","message":"sandbox not found: s","extra":{"k":1}}`))
		}}, want: `error S002: sandbox not found: s {"type":"validation","code":"S002","message":"sandbox not found: s","extra":{"k":1}}`, fast: true},
		{name: "timeout names sandbox::exec", binding: bound, contract: &v11, fn: "exec", ops: map[string]op{"exec": slow}, timeout: 300 * time.Millisecond,
			want: "error " + errcode.Timeout + ": function sandbox::exec did not answer within 300ms", fast: true},
		{name: "contract major 2 is S302", binding: bound, contract: &Contract{Major: 2}, fn: "exec", ops: map[string]op{"exec": reply(`{}`)},
			want: "error S302: the sandbox adapter 'sandbox-libkrun' in namespace 'default' implements sandbox contract 2.0"},
		{name: "no adapter is S301", binding: bound, fn: "exec",
			want: "error S301: the sandbox adapter 'sandbox-libkrun' bound to this engine is not connected in namespace 'default'"},
		{name: "unbound is S303", fn: "exec", want: "error S303: no sandbox adapter is bound to this engine"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, sp := observed(t, tc.binding)
			c := caller(t, url)
			adapterID := "none"
			if tc.contract != nil {
				fakeAdapter(t, url, *tc.contract, tc.ops)
				adapterID = workerID(t, c, "adapter")
			}
			sp.take(adapterID)
			var opts []protocol.CallOption
			if tc.timeout > 0 {
				opts = append(opts, protocol.WithTimeout(tc.timeout))
			}
			var got []string
			for range 2 {
				got = append(got, outcomeOf(c.Call(context.Background(), "sandbox::"+tc.fn, map[string]any{"sandbox_id": "s"}, opts...)))
			}
			if !strings.HasPrefix(got[0], tc.want) {
				t.Errorf("forwarded: %s\nwant %s", got[0], tc.want)
			}
			if got[1] != got[0] {
				t.Errorf("the second call answered otherwise:\n%s\nfirst:\n%s", got[1], got[0])
			}
			want := []string{"sandbox::" + tc.fn + "@engine"}
			if tc.fast {
				want = append(want, "sandbox::"+tc.fn+"@adapter")
			} else {
				want = append(want, want[0])
			}
			if s := sp.take(adapterID); strings.Join(s, " ") != strings.Join(want, " ") {
				t.Errorf("spans %q, want %q (one per call; the fast one names the adapter)", s, want)
			}
		})
	}
}

// TestRoutedCallOfDepartingAdapter: an adapter that disconnects while serving a call ends it
// with the same S301 on the fast path as through the forwarder.
func TestRoutedCallOfDepartingAdapter(t *testing.T) {
	url, sp := observed(t, &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"})
	c := caller(t, url)
	kill := func(warm bool) string {
		arrived := make(chan struct{})
		w := fakeAdapter(t, url, Contract{Major: 1, Minor: 1}, map[string]op{
			"list": func(context.Context, json.RawMessage) (any, error) { return map[string]any{}, nil },
			"exec": func(ctx context.Context, _ json.RawMessage) (any, error) {
				close(arrived)
				<-ctx.Done()
				return nil, ctx.Err()
			},
		})
		id := workerID(t, c, "adapter")
		if warm {
			if _, err := c.Call(context.Background(), "sandbox::list", map[string]any{}); err != nil {
				t.Fatal(err)
			}
		}
		sp.take(id)
		go func() { <-arrived; w.Close() }()
		out := outcomeOf(c.Call(context.Background(), "sandbox::exec", map[string]any{"sandbox_id": "s"}, protocol.WithTimeout(5*time.Second)))
		path := "engine"
		if warm {
			path = "adapter"
		}
		if s := sp.take(id); len(s) != 1 || s[0] != "sandbox::exec@"+path {
			t.Errorf("warm=%v: spans %q, want sandbox::exec@%s", warm, s, path)
		}
		return out
	}
	forwarded, routed := kill(false), kill(true)
	if !strings.HasPrefix(forwarded, "error "+scode.S301+": the sandbox adapter 'sandbox-libkrun' in namespace 'default' disconnected while serving sandbox::exec") {
		t.Fatalf("forwarded: %s", forwarded)
	}
	if routed != forwarded {
		t.Errorf("fast path:\n%s\nforwarder:\n%s", routed, forwarded)
	}
}

// TestProcessOpsNeedContract12: the process operations reach an adapter of contract 1.2, on
// the first call and the fast path alike; a contract 1.1 adapter, which has no process
// functions, or one that says 1.1 but registered one anyway, gets the caller S304 naming its
// contract, never a raw function_not_found nor S301; its other operations still work.
func TestProcessOpsNeedContract12(t *testing.T) {
	b := &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"}
	ok := func(context.Context, json.RawMessage) (any, error) { return map[string]any{"processes": []any{}}, nil }

	url, _ := observed(t, b)
	fakeAdapter(t, url, Contract{Major: 1, Minor: 2}, map[string]op{"process::list": ok})
	c := caller(t, url)
	for range 2 {
		res, err := c.Call(context.Background(), "sandbox::process::list", map[string]any{"sandbox_id": "x"})
		if got := outcomeOf(res, err); got != `result {"processes":[]}` {
			t.Fatalf("1.2 adapter: %s", got)
		}
	}

	for name, ops := range map[string]map[string]op{
		"without the functions":        {"exec": ok},
		"with a function it disclaims": {"exec": ok, "process::list": ok},
	} {
		url, _ := observed(t, b)
		fakeAdapter(t, url, Contract{Major: 1, Minor: 1}, ops)
		c := caller(t, url)
		for _, fn := range []string{"sandbox::process::list", "sandbox::process::start", "sandbox::process::list"} {
			_, err := c.Call(context.Background(), fn, map[string]any{"sandbox_id": "x"})
			if errCode(err) != scode.S304 || !strings.Contains(err.Error(), fn+" needs sandbox contract 1.2") ||
				!strings.Contains(err.Error(), "implements sandbox contract 1.1") {
				t.Fatalf("%s: %s: %v, want S304", name, fn, err)
			}
		}
		if _, err := c.Call(context.Background(), "sandbox::exec", map[string]any{}); err != nil {
			t.Fatalf("%s: sandbox::exec: %v", name, err)
		}
	}
}

// TestExposeOpsNeedContract13: the exposed-port operations reach an adapter of contract 1.3;
// one of contract 1.2 gets the caller S304 naming its contract.
func TestExposeOpsNeedContract13(t *testing.T) {
	b := &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"}
	ok := func(context.Context, json.RawMessage) (any, error) { return map[string]any{"ports": []any{}}, nil }

	url, _ := observed(t, b)
	fakeAdapter(t, url, Contract{Major: 1, Minor: 3}, map[string]op{"expose::list": ok})
	c := caller(t, url)
	res, err := c.Call(context.Background(), "sandbox::expose::list", map[string]any{"sandbox_id": "x"})
	if got := outcomeOf(res, err); got != `result {"ports":[]}` {
		t.Fatalf("1.3 adapter: %s", got)
	}

	url, _ = observed(t, b)
	fakeAdapter(t, url, Contract{Major: 1, Minor: 2}, map[string]op{"expose": ok, "expose::list": ok})
	c = caller(t, url)
	for _, fn := range []string{"sandbox::expose", "sandbox::unexpose", "sandbox::expose::list"} {
		_, err := c.Call(context.Background(), fn, map[string]any{"sandbox_id": "x"})
		if errCode(err) != scode.S304 || !strings.Contains(err.Error(), fn+" needs sandbox contract 1.3") ||
			!strings.Contains(err.Error(), "implements sandbox contract 1.2") {
			t.Fatalf("%s: %v, want S304", fn, err)
		}
	}
}

// TestSnapshotOpsNeedContract13: a contract 1.2 adapter (processes, no snapshots) gets the
// caller S304 naming 1.3 for the snapshot operations, while its process operations still work.
func TestSnapshotOpsNeedContract13(t *testing.T) {
	b := &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"}
	ok := func(context.Context, json.RawMessage) (any, error) { return map[string]any{"processes": []any{}}, nil }
	url, _ := observed(t, b)
	fakeAdapter(t, url, Contract{Major: 1, Minor: 2}, map[string]op{"process::list": ok})
	c := caller(t, url)
	for _, fn := range []string{"sandbox::snapshot", "sandbox::snapshot::list", "sandbox::snapshot::delete", "sandbox::fork", "sandbox::pause", "sandbox::resume"} {
		_, err := c.Call(context.Background(), fn, map[string]any{"sandbox_id": "x"})
		if errCode(err) != scode.S304 || !strings.Contains(err.Error(), fn+" needs sandbox contract 1.3") {
			t.Fatalf("%s: %v, want S304", fn, err)
		}
	}
	if _, err := c.Call(context.Background(), "sandbox::process::list", map[string]any{"sandbox_id": "x"}); err != nil {
		t.Fatalf("sandbox::process::list: %v", err)
	}
}

// TestGatedSessionNeedsSandboxGrant: the process, snapshot and expose operations are sandbox
// operations, so an RBAC session may call them only when its listener grants them: one that
// exposes only its own functions is refused each of them (and sandbox::exec) FORBIDDEN before
// anything reaches the adapter; one that exposes sandbox::* reaches it.
func TestGatedSessionNeedsSandboxGrant(t *testing.T) {
	e := core.New(core.Options{})
	New(e, &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"}).Install()
	bound := []core.Bound{
		{Listener: core.Listener{Name: "iii-worker-manager", HandshakeTimeout: 2 * time.Second}},
		{Listener: core.Listener{Name: "outsiders", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{Expose: []rbac.Filter{{Match: "api::*"}}}}},
		{Listener: core.Listener{Name: "granted", HandshakeTimeout: 2 * time.Second, RBAC: &rbac.Config{Expose: []rbac.Filter{{Match: "sandbox::*"}}}}},
	}
	urls := make([]string, len(bound))
	for i := range bound {
		bound[i].Net, urls[i] = enginetest.Listen(t)
	}
	enginetest.Go(t, func(ctx context.Context) error { return e.ServeAll(ctx, bound) })

	var reached atomic.Int64
	fakeAdapter(t, urls[0], Contract{Major: 1, Minor: 2}, map[string]op{
		"process::start": func(context.Context, json.RawMessage) (any, error) {
			reached.Add(1)
			return map[string]any{"process_id": "p1"}, nil
		},
		"exec": func(context.Context, json.RawMessage) (any, error) { reached.Add(1); return map[string]any{}, nil },
	})
	outsider := caller(t, urls[1])
	for _, fn := range []string{"sandbox::process::start", "sandbox::exec", "sandbox::process::list",
		"sandbox::snapshot", "sandbox::snapshot::list", "sandbox::snapshot::delete", "sandbox::fork", "sandbox::pause", "sandbox::resume",
		"sandbox::expose", "sandbox::unexpose", "sandbox::expose::list"} {
		_, err := outsider.Call(context.Background(), fn, map[string]any{"sandbox_id": "x", "cmd": "sh"})
		if errCode(err) != errcode.Forbidden {
			t.Fatalf("outsider: %s: %v, want FORBIDDEN", fn, err)
		}
	}
	if reached.Load() != 0 {
		t.Fatal("a refused call reached the adapter")
	}
	res, err := caller(t, urls[2]).Call(context.Background(), "sandbox::process::start", map[string]any{"sandbox_id": "x", "cmd": "sh"})
	if got := outcomeOf(res, err); got != `result {"process_id":"p1"}` || reached.Load() != 1 {
		t.Fatalf("granted session: %s", got)
	}
}

// TestNetworkPolicyNeedsContract14: a create or run whose network is a string or an object (an
// egress policy) reaches an adapter of contract 1.4; one of contract 1.3, which reads network
// as a bool, gets the caller S304 naming 1.4 (every call, the first one and those after its
// adapter::info is known), while its create with network true or false, or without network,
// is served as before.
func TestNetworkPolicyNeedsContract14(t *testing.T) {
	b := &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"}
	var seen []string
	ok := func(_ context.Context, payload json.RawMessage) (any, error) {
		seen = append(seen, string(payload))
		return map[string]any{"sandbox_id": "s"}, nil
	}
	policy := map[string]any{"image": "python", "network": map[string]any{"allow": []any{"192.0.2.2:8080"}}}

	url, _ := observed(t, b)
	fakeAdapter(t, url, Contract{Major: 1, Minor: 4}, map[string]op{"create": ok, "run": ok})
	c := caller(t, url)
	for range 2 {
		if _, err := c.Call(context.Background(), "sandbox::create", policy); err != nil {
			t.Fatalf("1.4 adapter: %v", err)
		}
	}
	if len(seen) != 2 || !strings.Contains(seen[0], `"allow":["192.0.2.2:8080"]`) {
		t.Fatalf("the 1.4 adapter received %q", seen)
	}

	seen = nil
	url, _ = observed(t, b)
	fakeAdapter(t, url, Contract{Major: 1, Minor: 3}, map[string]op{"create": ok, "run": ok})
	c = caller(t, url)
	for i, call := range []struct {
		fn      string
		payload any
	}{
		{"sandbox::create", policy},
		{"sandbox::create", policy},
		{"sandbox::create", map[string]any{"image": "python", "network": "on"}},
		{"sandbox::run", map[string]any{"image": "python", "code": "1", "lang": "python", "network": "off"}},
		{"sandbox::run", map[string]any{"network": map[string]any{}}},
	} {
		_, err := c.Call(context.Background(), call.fn, call.payload)
		if errCode(err) != scode.S304 || !strings.Contains(err.Error(), call.fn+` with network as "off", "on" or an egress policy object needs sandbox contract 1.4`) ||
			!strings.Contains(err.Error(), "implements sandbox contract 1.3") {
			t.Fatalf("call %d %s: %v, want S304", i, call.fn, err)
		}
	}
	for _, payload := range []any{
		map[string]any{"image": "python", "network": true},
		map[string]any{"image": "python", "network": false},
		map[string]any{"image": "python", "name": "network", "env": map[string]any{"network": "x"}}, // not the top-level key
	} {
		if _, err := c.Call(context.Background(), "sandbox::create", payload); err != nil {
			t.Fatalf("1.3 adapter, %v: %v", payload, err)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("the 1.3 adapter received %q", seen)
	}
}
