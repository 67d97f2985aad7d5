package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/iii-go/iii/engine/enginetest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
)

func TestFillTruncation(t *testing.T) {
	cases := map[string]string{
		`{"stdout":"a","exit_code":0}`: `{"exit_code":0,"stderr_truncated":false,"stdout":"a","stdout_truncated":false}`,
		`{"stdout_truncated":true}`:    `{"stderr_truncated":false,"stdout_truncated":true}`,
		`[1,2]`:                        `[1,2]`,
		`null`:                         `null`,
		`{"stdout_truncated":true,"stderr_truncated":true}`: `{"stderr_truncated":true,"stdout_truncated":true}`,
	}
	for in, want := range cases {
		var g, w any
		_ = json.Unmarshal(fillTruncation(json.RawMessage(in)), &g)
		_ = json.Unmarshal([]byte(want), &w)
		if d := cmp.Diff(w, g); d != "" {
			t.Errorf("%s: %s", in, d)
		}
	}
}

func TestEnvelope(t *testing.T) {
	var got map[string]any
	_ = json.Unmarshal(unbound("exec").Raw(), &got)
	for _, k := range []string{"type", "code", "message", "docs_url", "retryable", "fix", "fix_note"} {
		if _, ok := got[k]; !ok {
			t.Errorf("envelope lacks %s: %v", k, got)
		}
	}
	if got["docs_url"] != "https://iii.dev/docs/using-iii/sandboxes#s303" {
		t.Errorf("docs_url %v", got["docs_url"])
	}
}

func serve(t *testing.T, opts core.Options, b *Binding) (*core.Engine, *Router, string) {
	t.Helper()
	e := core.New(opts)
	r := New(e, b)
	r.Install()
	return e, r, enginetest.Start(t, e).URL
}

// adapter connects a worker in ns presenting token that answers every op with {"who": who}.
func adapter(t *testing.T, url, ns, token, who string, ops ...string) *protocol.Worker {
	t.Helper()
	w := protocol.NewWorker(protocol.Config{URL: url, Namespace: ns, Name: who, Token: token})
	for _, op := range ops {
		if err := w.Register(DefaultAdapter+"::"+op, func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"who": who, "contract": Contract{Major: 1, Minor: 1}}, nil
		}); err != nil {
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

func call(t *testing.T, url, fn string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "caller", NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res, err := w.Call(ctx, fn, map[string]any{"code": "print(open('/secret').read())"})
	if err != nil {
		return "", err
	}
	var out struct{ Who string }
	_ = json.Unmarshal(res, &out)
	return out.Who, nil
}

func errCode(err error) string {
	var e *protocol.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// TestRouterKeepsBoundPrefixToOneWorker: in default, a worker that registers
// sandbox-libkrun::run and ::fs::write after the adapter is refused, so sandbox::run still
// reaches the adapter and sandbox::fs::write (which the adapter lacks) is S301 instead of going
// to the squatter.
func TestRouterKeepsBoundPrefixToOneWorker(t *testing.T) {
	e, _, url := serve(t, core.Options{}, &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"})
	adapter(t, url, "default", "", "real", "adapter::info", "run")
	adapter(t, url, "default", "", "squatter", "run", "fs::write")
	if who, err := call(t, url, "sandbox::run"); err != nil || who != "real" {
		t.Fatalf("sandbox::run went to %q (%v), want real", who, err)
	}
	if _, err := call(t, url, "sandbox::fs::write"); errCode(err) != scode.S301 {
		t.Fatalf("sandbox::fs::write: %v, want S301", err)
	}
	if _, ok := e.Lookup("default", DefaultAdapter+"::fs::write"); ok {
		t.Fatal("the squatter registered under the bound prefix")
	}
}

// TestRouterDefaultOnEngineWithTokens: on an engine with token-protected namespaces (as Compose
// starts for a project in default), a squatter without a token cannot take the bound prefix even
// when it comes first; the adapter holding the project token then serves sandbox::*.
func TestRouterDefaultOnEngineWithTokens(t *testing.T) {
	dir := t.TempDir()
	tok, owner := filepath.Join(dir, "token"), filepath.Join(dir, "owner")
	_ = os.WriteFile(tok, []byte("project-secret"), 0o600)
	_ = os.WriteFile(owner, []byte("owner-secret"), 0o600)
	e, _, url := serve(t, core.Options{Namespaces: map[string]core.NamespacePolicy{"iii-compose-owner": {TokenFile: tok, OwnerTokenFile: owner}}},
		&Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"})
	adapter(t, url, "default", "", "squatter", "adapter::info", "run")
	if _, ok := e.Lookup("default", DefaultAdapter+"::run"); ok {
		t.Fatal("a worker without a token took the bound prefix")
	}
	adapter(t, url, "default", "project-secret", "real", "adapter::info", "run")
	if who, err := call(t, url, "sandbox::run"); err != nil || who != "real" {
		t.Fatalf("sandbox::run went to %q (%v), want real", who, err)
	}
}

// TestBindClaimsNewPrefix: engine::sandbox::bind moves the claim to the new adapter prefix and
// namespace; the old prefix is open again.
func TestBindClaimsNewPrefix(t *testing.T) {
	e, r, url := serve(t, core.Options{}, nil)
	if _, err := r.bind(context.Background(), core.Caller{Owner: true}, json.RawMessage(`{"adapter":"sandbox-libkrun","namespace":"proj"}`)); err != nil {
		t.Fatal(err)
	}
	adapter(t, url, "proj", "", "real", "adapter::info", "run")
	adapter(t, url, "proj", "", "squatter", "exec")
	if _, ok := e.Lookup("proj", DefaultAdapter+"::exec"); ok {
		t.Fatal("bind did not claim the prefix")
	}
	if _, err := r.bind(context.Background(), core.Caller{Owner: true}, json.RawMessage(`{"adapter":"other","namespace":"proj"}`)); err != nil {
		t.Fatal(err)
	}
	adapter(t, url, "proj", "", "late", "stop")
	if _, ok := e.Lookup("proj", DefaultAdapter+"::stop"); !ok {
		t.Fatal("the old prefix is still claimed after a new bind")
	}
}

// TestS301NamesTheGrantOnlyWhereNeeded: on an engine without token-protected
// namespaces the S301 fix is the guide's (compose::add, or an adapter-only compose file), since
// the engine's owner credential lets a Compose of its user publish the adapter's entry; on one
// that protects namespaces the fix also names the grant of Compose's owner token.
func TestS301NamesTheGrantOnlyWhereNeeded(t *testing.T) {
	b := &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"}
	_, _, plain := serve(t, core.Options{}, b)
	_, err := call(t, plain, "sandbox::list")
	if errCode(err) != scode.S301 || strings.Contains(err.Error(), "owner_token_file") {
		t.Fatalf("plain engine: %v, want S301 without the grant", err)
	}
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	_ = os.WriteFile(tok, []byte("project-secret"), 0o600)
	_, _, protected := serve(t, core.Options{Namespaces: map[string]core.NamespacePolicy{"team": {TokenFile: tok}}}, b)
	_, err = call(t, protected, "sandbox::list")
	if errCode(err) != scode.S301 || !strings.Contains(err.Error(), "owner_token_file: <state dir>/owner-token") {
		t.Fatalf("protected engine: %v, want S301 naming the grant", err)
	}
}

// TestAdapterInfoAskedAfresh: sandbox::adapter::info shows the adapter's adapter::info as it is
// now (its counters change), not as it was first asked on the adapter's connection.
func TestAdapterInfoAskedAfresh(t *testing.T) {
	_, _, url := serve(t, core.Options{}, &Binding{Adapter: DefaultAdapter, Namespace: "default", Source: "config"})
	var made atomic.Int64
	w := protocol.NewWorker(protocol.Config{URL: url, Namespace: "default", Name: "real"})
	if err := w.Register(DefaultAdapter+"::adapter::info", func(context.Context, json.RawMessage) (any, error) {
		return map[string]any{"contract": Contract{Major: 1, Minor: 1}, "snapshots": map[string]int64{"made": made.Add(1)}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	caller, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "caller", NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	var got []string
	for range 2 {
		res, err := caller.Call(ctx, "sandbox::adapter::info", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Info struct {
				Snapshots struct{ Made int64 } `json:"snapshots"`
			} `json:"info"`
		}
		if err := json.Unmarshal(res, &out); err != nil {
			t.Fatal(err)
		}
		got = append(got, strconv.FormatInt(out.Info.Snapshots.Made, 10))
	}
	if got[0] == got[1] {
		t.Errorf("two sandbox::adapter::info calls showed snapshots.made %v: the adapter was not asked again", got)
	}
}
