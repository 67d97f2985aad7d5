package rbac

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		p, v string
		want bool
	}{
		{"hello::world", "hello::world", true}, {"hello::world", "hello::worldx", false},
		{"engine::*", "engine::a::b", true}, {"engine::*", "other::a", false},
		{"*::public", "x::y::public", true}, {"*::public", "api::private", false},
		{"*public*", "mypublicfn", true}, {"*public*", "private", false},
		{"*", "", true}, {"api::*::read", "api::users::read", true}, {"api::*::read", "api::users::write", false},
		{"a*a", "a", false}, {"a*a", "aa", true},
	}
	for _, c := range cases {
		if got := Match(c.p, c.v); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.p, c.v, got, c.want)
		}
	}
}

func TestParseFilter(t *testing.T) {
	f, err := ParseFilter(`match("api::*")`)
	if err != nil || f.Match != "api::*" {
		t.Fatalf("got %+v, %v", f, err)
	}
	f, err = ParseFilter(map[string]any{"metadata": map[string]any{"public": true, "name": `match("*pub*")`, "tier": 2}, "namespace": "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Matches("x", "orders", json.RawMessage(`{"public":true,"name":"a-pub-b","tier":2}`)) {
		t.Error("metadata filter should match")
	}
	for _, meta := range []string{`{"public":false,"name":"pub","tier":2}`, `{"public":true,"name":"priv","tier":2}`, `{"public":true,"name":"pub"}`, ``, `[1]`} {
		if f.Matches("x", "orders", json.RawMessage(meta)) {
			t.Errorf("metadata %s should not match", meta)
		}
	}
	if f.Matches("x", "default", json.RawMessage(`{"public":true,"name":"pub","tier":2}`)) {
		t.Error("a filter scoped to orders matched in default")
	}
	for _, bad := range []any{"api::*", 3, map[string]any{"namesapce": "x", "match": "a"}, map[string]any{"match": "a", "metadata": map[string]any{"a": 1}}, map[string]any{}} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("ParseFilter(%v) accepted", bad)
		}
	}
}

func TestAllowed(t *testing.T) {
	cfg := &Config{Expose: []Filter{{Match: "api::*"}, {Metadata: map[string]MetaMatch{"public": {Exact: true}}}}}
	s := &Session{AllowedFunctions: []string{"extra::fn"}, ForbiddenFunctions: []string{"api::secret", "engine::log::info"},
		Namespaces: map[string][]string{"orders": {`match("svc::*")`}}}
	cases := []struct {
		id, ns, meta string
		want         bool
	}{
		{"api::list", "default", "", true},
		{"api::secret", "default", "", false},       // forbidden wins over expose
		{"engine::log::info", "default", "", false}, // and over the infrastructure carve-out
		{"internal::fn", "default", "", false},      // deny by default
		{"internal::fn", "default", `{"public":true}`, true},
		{"extra::fn", "default", "", true},
		{"extra::fn", "orders", "", false}, // allowed_functions answer in default only
		{"svc::get", "orders", "", true},
		{"svc::get", "analytics", "", false},
		{"api::list", "orders", "", false}, // a namespace-less filter matches default only
		{"engine::channels::create", "orders", "", true},
		{"engine::functions::list", "default", "", false},
	}
	for _, c := range cases {
		if got := cfg.Allowed(s, c.id, c.ns, json.RawMessage(c.meta)); got != c.want {
			t.Errorf("Allowed(%s in %s, %s) = %v, want %v", c.id, c.ns, c.meta, got, c.want)
		}
	}
	var none *Config
	if !none.Allowed(Open(), "anything", "default", nil) || none.Allowed(s, "api::secret", "default", nil) {
		t.Error("a middleware-only listener exposes everything not forbidden")
	}
}

func TestParseAuthResult(t *testing.T) {
	s, err := ParseAuthResult(json.RawMessage(`{"allowed_functions":["a"],"context":{"user":"u1"},"function_registration_prefix":"u1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !s.AllowFunctionRegistration || s.AllowTriggerTypeRegistration || s.AllowedTriggerTypes != nil || string(s.Context) != `{"user":"u1"}` {
		t.Errorf("defaults: %+v", s)
	}
	if s.Prefixed("fn") != "u1::fn" || s.Local("u1::fn") != "fn" {
		t.Errorf("prefix: %q %q", s.Prefixed("fn"), s.Local("u1::fn"))
	}
	s, _ = ParseAuthResult(json.RawMessage(`{"allowed_trigger_types":[],"allow_function_registration":false}`))
	if s.MayUseTriggerType("cron") || s.AllowFunctionRegistration || string(s.Context) != "{}" {
		t.Errorf("explicit: %+v", s)
	}
	for _, bad := range []string{``, `null`, `true`, `"x"`, `{"allowed_functions":"a"}`, `{} {}`} {
		if _, err := ParseAuthResult(json.RawMessage(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A misspelt key must not silently allow what it meant to deny: the result is refused, the
// error naming the key.
func TestParseAuthResultRefusesUnknownKeys(t *testing.T) {
	_, err := ParseAuthResult(json.RawMessage(`{"allowed_functions":["api::x"],"forbiden_functions":["api::danger"]}`))
	if err == nil || !strings.Contains(err.Error(), `unknown key "forbiden_functions"`) || !strings.Contains(err.Error(), "forbidden_functions") {
		t.Fatalf("err = %v", err)
	}
}

// An Open session (no auth function) may not register trigger types: the provider of a type
// receives every trigger of it.
func TestOpenMayNotRegisterTriggerTypes(t *testing.T) {
	if s := Open(); s.AllowTriggerTypeRegistration || !s.AllowFunctionRegistration {
		t.Errorf("Open() = %+v", s)
	}
}

func TestNewAuthInput(t *testing.T) {
	r := httptest.NewRequest("GET", "/?api_key=k1&api_key=k2", nil)
	r.Header.Set("X-Test-Token", "valid")
	r.RemoteAddr = "10.1.2.3:5555"
	in := NewAuthInput(r)
	if in.Headers["x-test-token"] != "valid" || in.IPAddress != "10.1.2.3" {
		t.Errorf("%+v", in)
	}
	if d := cmp.Diff([]string{"k1", "k2"}, in.QueryParams["api_key"]); d != "" {
		t.Error(d)
	}
}

func TestHooks(t *testing.T) {
	in := HookInput(&FunctionReg{FunctionID: "a::b"}, json.RawMessage(`{"u":1}`))
	var m map[string]any
	if err := json.Unmarshal(in, &m); err != nil || m["function_id"] != "a::b" || m["context"].(map[string]any)["u"] != 1.0 {
		t.Fatalf("%s %v", in, err)
	}
	reg := &FunctionReg{FunctionID: "a::b", Description: "d"}
	if !ApplyHook(json.RawMessage(`{"function_id":"x::b","metadata":{"k":1}}`), reg) || reg.FunctionID != "x::b" || reg.Description != "d" || string(reg.Metadata) != `{"k":1}` {
		t.Errorf("rewrite: %+v", reg)
	}
	if !ApplyHook(json.RawMessage(`{}`), reg) || reg.FunctionID != "x::b" {
		t.Error("{} admits unchanged")
	}
	for _, deny := range []string{``, `null`, `false`, `true`, `"ok"`, `[1]`} {
		if ApplyHook(json.RawMessage(deny), &TriggerTypeReg{}) {
			t.Errorf("%q admitted", deny)
		}
	}
	tr := &TriggerReg{TriggerID: "t", TriggerType: "cron", FunctionID: "f"}
	if !ApplyHook(json.RawMessage(`{"config":{"expression":"x"}}`), tr) || !strings.Contains(string(tr.Config), "expression") || tr.FunctionID != "f" {
		t.Errorf("trigger: %+v", tr)
	}
}

// BenchmarkAllowed: the gate's cost per call, for a session with a few grants and an
// expose_functions list of ten wildcard filters and one metadata filter.
func BenchmarkAllowed(b *testing.B) {
	cfg := &Config{Expose: []Filter{{Metadata: map[string]MetaMatch{"public": {Exact: true}}}}}
	for i := 0; i < 10; i++ {
		cfg.Expose = append(cfg.Expose, Filter{Match: "svc" + strings.Repeat("x", i) + "::*"})
	}
	s := &Session{AllowedFunctions: []string{"a::b", "c::d"}, ForbiddenFunctions: []string{"e::f"}}
	meta := json.RawMessage(`{"public":false,"tier":"free"}`)
	b.ReportAllocs()
	for b.Loop() {
		if cfg.Allowed(s, "svcxxxxxxxxx::list", "default", meta) != true {
			b.Fatal("denied")
		}
	}
}
