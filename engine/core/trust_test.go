package core

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

func writeToken(t *testing.T, name, value string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tokenWorker connects a worker presenting token (none when empty) in ns with fns registered,
// some of them protected.
func tokenWorker(t *testing.T, url, ns, token string, protected []string, plain []string) *protocol.Worker {
	t.Helper()
	w := protocol.NewWorker(protocol.Config{URL: url, Namespace: ns, Name: "w-" + ns, Token: token})
	h := func(_ context.Context, in json.RawMessage) (any, error) { return map[string]string{"ok": "yes"}, nil }
	for _, id := range protected {
		if err := w.Register(id, h, protocol.Protected()); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range plain {
		if err := w.Register(id, h); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func callAs(t *testing.T, url, token, ns, fn string) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "caller", Token: token, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	return w.Call(ctx, fn, map[string]any{}, protocol.InNamespace(ns))
}

func clearTokenEnv(t *testing.T) {
	t.Setenv(protocol.EnvTokenFile, "")
	t.Setenv(protocol.EnvToken, "")
}

// TestProtectedFunctionInProtectedNamespace: Compose's daemon holds the owner token and
// registers compose::* protected in its project namespace. Anonymous callers and callers with
// a foreign token get FORBIDDEN with a message naming the token and where iii call looks for
// it; holders of the project token (accepted by the same namespace) or of the owner token get
// through; an unprotected function of the same worker stays open.
func TestProtectedFunctionInProtectedNamespace(t *testing.T) {
	clearTokenEnv(t)
	proj := writeToken(t, "token", "project-secret")
	owner := writeToken(t, "owner", "owner-secret")
	other := writeToken(t, "other", "other-secret")
	url := enginetest.Start(t, New(Options{Namespaces: map[string]NamespacePolicy{
		"shop":  {TokenFile: proj, OwnerTokenFile: owner},
		"other": {TokenFile: other},
	}})).URL
	tokenWorker(t, url, "shop", "owner-secret", []string{"compose::status", "compose::stop"}, []string{"shop::open"})

	for _, tc := range []struct{ name, token, want string }{
		{"anonymous", "", "presented none"},
		{"a token of another namespace", "other-secret", "presented a different one"},
		{"a made-up token", "guess", "presented a different one"},
	} {
		for _, fn := range []string{"compose::status", "compose::stop"} {
			_, err := callAs(t, url, tc.token, "shop", fn)
			if code(err) != errcode.Forbidden {
				t.Fatalf("%s calling %s: %v, want FORBIDDEN", tc.name, fn, err)
			}
			msg := err.Error()
			for _, want := range []string{tc.want, "'" + fn + "'", "namespace 'shop'", "III_TOKEN_FILE", "~/.iii/compose/tokens/"} {
				if !strings.Contains(msg, want) {
					t.Errorf("%s calling %s: message %q lacks %q", tc.name, fn, msg, want)
				}
			}
			for _, secret := range []string{"project-secret", "owner-secret"} {
				if strings.Contains(msg, secret) {
					t.Errorf("message shows a token: %q", msg)
				}
			}
		}
	}
	for _, tok := range []string{"project-secret", "owner-secret"} {
		if _, err := callAs(t, url, tok, "shop", "compose::status"); err != nil {
			t.Errorf("token %s: %v", tok, err)
		}
	}
	if _, err := callAs(t, url, "", "shop", "shop::open"); err != nil {
		t.Errorf("an unprotected function of the same worker: %v", err)
	}
}

// TestProtectedFunctionInDefault: default cannot be token-protected, yet a protected function
// there is callable only with the registering worker's own token (a Compose attached to an
// engine with no namespaces: configured), and from a worker connection (the engine's fast
// path) as well as from a one-shot caller.
func TestProtectedFunctionInDefault(t *testing.T) {
	clearTokenEnv(t)
	url := enginetest.Start(t, New(Options{})).URL
	tokenWorker(t, url, "default", "attached-secret", []string{"compose::up"}, nil)
	if _, err := callAs(t, url, "", "default", "compose::up"); code(err) != errcode.Forbidden {
		t.Fatalf("anonymous: %v", err)
	}
	if _, err := callAs(t, url, "attached-secret", "default", "compose::up"); err != nil {
		t.Fatalf("same token: %v", err)
	}
	// A registered worker calls through forwardAsync.
	w := tokenWorker(t, url, "default", "", nil, []string{"x::y"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.Call(ctx, "compose::up", map[string]any{}); code(err) != errcode.Forbidden {
		t.Fatalf("worker without the token: %v", err)
	}
	w2 := tokenWorker(t, url, "default", "attached-secret", nil, []string{"x::z"})
	if _, err := w2.Call(ctx, "compose::up", map[string]any{}); err != nil {
		t.Fatalf("worker with the token: %v", err)
	}
}

// TestProtectedNeedsToken: a worker without a token cannot register a protected function (no
// one could ever call it, and it would squat the id).
func TestProtectedNeedsToken(t *testing.T) {
	clearTokenEnv(t)
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	got := rawRegister(t, url, "", "default", `{"type":"registerfunction","id":"compose::stop","protected":true}`)
	if got["compose::stop"] != errcode.TokenRequired {
		t.Fatalf("rejections %v, want compose::stop %s", got, errcode.TokenRequired)
	}
	if _, ok := e.Lookup("default", "compose::stop"); ok {
		t.Fatal("registered anyway")
	}
}

// rawRegister sends the registration frames and engine::workers::register in ns over a raw
// socket presenting token, and returns the code of each registrationrejected by function id.
func rawRegister(t *testing.T, url, token, ns string, frames ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{}
	if token != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + token}}
	}
	c, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	for _, f := range frames {
		if err := c.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	reg, _ := json.Marshal(map[string]any{"type": "invokefunction", "invocation_id": "r", "function_id": protocol.FnRegisterWorker,
		"data": map[string]any{"name": "raw", "namespace": ns}})
	if err := c.Write(ctx, websocket.MessageText, reg); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading: %v (rejections so far %v)", err, out)
		}
		m, err := protocol.Decode(b)
		if err != nil {
			continue
		}
		switch {
		case m.Type == protocol.TypeRegistrationRejected:
			out[m.FunctionID] = m.Code
		case m.Type == protocol.TypeInvocationResult && m.InvocationID == "r":
			return out
		}
	}
}

func fn(id string) string { return `{"type":"registerfunction","id":"` + id + `"}` }

// TestClaimedPrefixOneWorker: once the sandbox router claims sandbox-libkrun:: in default, every
// function under it comes from one live worker: a second worker (a squatter that would receive
// every sandbox payload, or a late real adapter) is refused FUNCTION_PREFIX_CONFLICT for every id
// under the prefix, including ids the first did not register; other ids and other namespaces are
// unaffected. When the first leaves, the prefix is free again.
func TestClaimedPrefixOneWorker(t *testing.T) {
	clearTokenEnv(t)
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	e.ClaimPrefix("default", "sandbox-libkrun::")
	first := rawRegister(t, url, "", "default", fn("sandbox-libkrun::adapter::info"), fn("sandbox-libkrun::run"))
	if len(first) != 0 {
		t.Fatalf("first worker refused: %v", first)
	}
	owner, _ := e.Lookup("default", "sandbox-libkrun::run")
	got := rawRegister(t, url, "", "default", fn("sandbox-libkrun::run"), fn("sandbox-libkrun::fs::write"), fn("other::fn"))
	want := map[string]string{"sandbox-libkrun::run": errcode.FunctionPrefixConflict, "sandbox-libkrun::fs::write": errcode.FunctionPrefixConflict}
	if len(got) != len(want) || got["sandbox-libkrun::run"] != want["sandbox-libkrun::run"] || got["sandbox-libkrun::fs::write"] != want["sandbox-libkrun::fs::write"] {
		t.Fatalf("second worker: rejections %v, want %v", got, want)
	}
	if w, _ := e.Lookup("default", "sandbox-libkrun::run"); w != owner {
		t.Fatal("the second worker took sandbox-libkrun::run")
	}
	if _, ok := e.Lookup("default", "sandbox-libkrun::fs::write"); ok {
		t.Fatal("the second worker added a function under the claimed prefix")
	}
	if got := rawRegister(t, url, "", "proj", fn("sandbox-libkrun::run")); len(got) != 0 {
		t.Fatalf("another namespace is not claimed: %v", got)
	}

	// Without the claim (before this change) the same registration went through.
	e2 := New(Options{})
	url2 := enginetest.Start(t, e2).URL
	rawRegister(t, url2, "", "default", fn("sandbox-libkrun::adapter::info"))
	rawRegister(t, url2, "", "default", fn("sandbox-libkrun::run"))
	a, _ := e2.Lookup("default", "sandbox-libkrun::adapter::info")
	b, _ := e2.Lookup("default", "sandbox-libkrun::run")
	if a == b {
		t.Fatal("unclaimed: expected two workers under one prefix")
	}
}

// TestClaimedPrefixReleasedOnDisconnect: the claim holds only while the first worker is live.
func TestClaimedPrefixReleasedOnDisconnect(t *testing.T) {
	clearTokenEnv(t)
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	e.ClaimPrefix("default", "box::")
	w := tokenWorker(t, url, "default", "", nil, []string{"box::run"})
	w.Close()
	enginetest.Eventually(t, "the closed worker's function to go", 5*time.Second, func() bool {
		_, ok := e.Lookup("default", "box::run")
		return !ok
	})
	if got := rawRegister(t, url, "", "default", fn("box::run")); len(got) != 0 {
		t.Fatalf("after the first left: %v", got)
	}
}

// TestClaimedPrefixNeedsTokenWhenEngineHasTokens: on an engine with token-protected namespaces
// (every engine Compose starts), the claimed prefix in the unprotected default namespace admits
// only a worker holding one of the engine's tokens; anonymous and unknown tokens are refused.
func TestClaimedPrefixNeedsTokenWhenEngineHasTokens(t *testing.T) {
	clearTokenEnv(t)
	proj := writeToken(t, "token", "project-secret")
	owner := writeToken(t, "owner", "owner-secret")
	e := New(Options{Namespaces: map[string]NamespacePolicy{"iii-compose-owner": {TokenFile: proj, OwnerTokenFile: owner}}})
	url := enginetest.Start(t, e).URL
	e.ClaimPrefix("default", "sandbox-libkrun::")
	if got := rawRegister(t, url, "", "default", fn("sandbox-libkrun::run")); got["sandbox-libkrun::run"] != errcode.TokenRequired {
		t.Fatalf("anonymous: %v", got)
	}
	if got := rawRegister(t, url, "guess", "default", fn("sandbox-libkrun::run")); got["sandbox-libkrun::run"] != errcode.TokenInvalid {
		t.Fatalf("unknown token: %v", got)
	}
	if got := rawRegister(t, url, "", "default", fn("unclaimed::run")); len(got) != 0 {
		t.Fatalf("an unclaimed id: %v", got)
	}
	if got := rawRegister(t, url, "project-secret", "default", fn("sandbox-libkrun::run")); len(got) != 0 {
		t.Fatalf("project token: %v", got)
	}
	if _, ok := e.Lookup("default", "sandbox-libkrun::run"); !ok {
		t.Fatal("the token holder's function is missing")
	}
}
