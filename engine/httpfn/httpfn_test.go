package httpfn

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/internal/base/errcode"
)

// open is an invoker for 127.0.0.1 that grants each variable of env as a secret of that name,
// for 127.0.0.1.
func open(t *testing.T, env map[string]string) *Invoker {
	t.Helper()
	secrets := map[string]Secret{}
	for k := range env {
		secrets[k] = Secret{Env: k, Hosts: []string{"127.0.0.1"}}
	}
	inv, err := New(Security{URLAllowlist: []string{"127.0.0.1"}, Secrets: secrets}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func register(t *testing.T, inv *Invoker, inv2 string) *Function {
	t.Helper()
	f, err := inv.Register(context.Background(), "x::f", json.RawMessage(inv2))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Every outcome of a call, with iii's codes, and the headers and body the endpoint receives.
func TestCallOutcomes(t *testing.T) {
	var got http.Header
	var gotBody, gotMethod string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, gotBody, gotMethod = r.Header.Clone(), string(b), r.Method
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte(`{"ok":true}`))
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/text":
			_, _ = w.Write([]byte("not-json"))
		case "/redirect":
			w.Header().Set("Location", "/ok")
			w.WriteHeader(http.StatusFound)
			_, _ = w.Write([]byte("<html>"))
		case "/envelope":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`{"error":{"code":"UPSTREAM","message":"upstream failed"}}`))
		case "/plain":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte("bad"))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	}))
	defer srv.Close()
	inv := open(t, map[string]string{"TOK": "s3cret", "KEY": "k1", "HSEC": "hs"})
	ctx := context.Background()

	f := register(t, inv, `{"url":"`+srv.URL+`/ok","method":"PUT","headers":{"X-Custom":"yes"},"auth":{"type":"bearer","token_key":"TOK"}}`)
	res, perr := inv.Call(ctx, f, "iid-1", json.RawMessage(`{"a":1}`))
	if perr != nil || string(res) != `{"ok":true}` {
		t.Fatalf("ok: %s %v", res, perr)
	}
	if gotMethod != "PUT" || gotBody != `{"a":1}` || got.Get("Authorization") != "Bearer s3cret" || got.Get("X-Custom") != "yes" ||
		got.Get("Content-Type") != "application/json" || got.Get("x-iii-Function-Path") != "x::f" || got.Get("x-iii-Invocation-ID") != "iid-1" ||
		got.Get("x-iii-Timestamp") == "" {
		t.Errorf("request: %s %s %v", gotMethod, gotBody, got)
	}

	f = register(t, inv, `{"url":"`+srv.URL+`/ok","auth":{"type":"hmac","secret_key":"HSEC"}}`)
	if _, perr := inv.Call(ctx, f, "i", json.RawMessage(`[1]`)); perr != nil || gotMethod != "POST" {
		t.Fatal(perr, gotMethod)
	}
	if want := Sign([]byte(`[1]`), "hs", got.Get("x-iii-Timestamp")); got.Get("x-iii-Signature") != want || !strings.HasPrefix(want, "sha256=") {
		t.Errorf("signature %q, want %q", got.Get("x-iii-Signature"), want)
	}
	f = register(t, inv, `{"url":"`+srv.URL+`/ok","auth":{"type":"api_key","header":"X-Api-Key","value_key":"KEY"}}`)
	if _, perr := inv.Call(ctx, f, "i", nil); perr != nil || got.Get("X-Api-Key") != "k1" || gotBody != "null" {
		t.Errorf("api_key: %v %v %q", perr, got, gotBody)
	}

	for _, c := range []struct{ path, res, code, msg string }{
		{"/empty", "", "", ""},
		{"/redirect", "", "", ""},
		{"/text", "", "invalid_response", "not JSON"},
		{"/envelope", "", "UPSTREAM", "upstream failed"},
		{"/plain", "", "http_error", "HTTP 400 Bad Request"},
		{"/slow", "", "http_request_failed", "no answer within 200ms"},
	} {
		f := register(t, inv, `{"url":"`+srv.URL+c.path+`","timeout_ms":200}`)
		res, perr := inv.Call(ctx, f, "i", nil)
		if c.code == "" {
			if perr != nil || res != nil {
				t.Errorf("%s: %s %v", c.path, res, perr)
			}
			continue
		}
		if perr == nil || perr.Code != c.code || !strings.Contains(perr.Message, c.msg) {
			t.Errorf("%s: %v, want %s %q", c.path, perr, c.code, c.msg)
		}
	}
	srv.Close()
	f = register(t, inv, `{"url":"`+srv.URL+`/ok"}`)
	if _, perr := inv.Call(ctx, f, "i", nil); perr == nil || perr.Code != "http_request_failed" {
		t.Errorf("server gone: %v", perr)
	}
}

// Registration refuses what the security settings refuse, naming the URL and the key; bad
// invocations and unset secrets are refused too, and no secret appears in a message.
func TestRegisterRefusals(t *testing.T) {
	strict, _ := New(DefaultSecurity(), func(string) (string, bool) { return "", false })
	listed, _ := New(Security{URLAllowlist: []string{"*.example.com"}}, nil)
	secret, _ := New(Security{URLAllowlist: []string{"*"}, Secrets: map[string]Secret{
		"SET": {Env: "SET", Hosts: []string{"*.test"}}, "UNSET": {Env: "UNSET", Hosts: []string{"a.test"}},
		"RENAMED": {Env: "SET", Hosts: []string{"a.test"}}, "SCOPED": {Env: "SET", Hosts: []string{"api.example.com"}},
	}}, func(k string) (string, bool) { return "s3cret", k == "SET" || k == "HOME" })
	for _, c := range []struct {
		inv       *Invoker
		in, code  string
		mentioned []string
	}{
		{strict, `{"url":"http://api.example.com/x"}`, errcode.HTTPURLRefused, []string{"http://api.example.com/x", "security.require_https"}},
		{strict, `{"url":"https://127.0.0.1/x"}`, errcode.HTTPURLRefused, []string{"https://127.0.0.1/x", "security.block_private_ips"}},
		{strict, `{"url":"https://10.1.2.3/x"}`, errcode.HTTPURLRefused, []string{"security.block_private_ips"}},
		{strict, `{"url":"https://[::1]/x"}`, errcode.HTTPURLRefused, []string{"security.block_private_ips"}},
		{listed, `{"url":"http://evil.test/x"}`, errcode.HTTPURLRefused, []string{`"evil.test"`, "security.url_allowlist"}},
		{listed, `{"url":"ftp://a.example.com/x"}`, errcode.HTTPURLRefused, []string{"not an http(s) URL"}},
		{secret, `{"url":"http://a.test","method":"TRACE"}`, errcode.HTTPInvocationInvalid, []string{"TRACE"}},
		{secret, `{"url":"http://a.test","timeout_ms":0}`, errcode.HTTPInvocationInvalid, []string{"timeout_ms"}},
		{secret, `{"url":"http://a.test","headers":{"Bad Name":"v"}}`, errcode.HTTPInvocationInvalid, []string{"Bad Name"}},
		{secret, `{"url":"http://a.test","auth":{"type":"basic"}}`, errcode.HTTPInvocationInvalid, []string{"basic"}},
		{secret, `{"url":"http://a.test","auth":{"type":"bearer","token_key":"UNSET"}}`, errcode.HTTPAuthUnresolved, []string{"UNSET"}},
		// Only granted secrets: an environment variable the engine has is not one.
		{secret, `{"url":"http://a.test","auth":{"type":"bearer","token_key":"HOME"}}`, errcode.HTTPSecretRefused, []string{`"HOME"`, "secrets:"}},
		{secret, `{"url":"http://a.test","auth":{"type":"hmac","secret_key":""}}`, errcode.HTTPSecretRefused, []string{`""`}},
		{secret, `{"url":"http://a.test","auth":{"type":"api_key","header":"X-K","value_key":"HOME"}}`, errcode.HTTPSecretRefused, []string{`"HOME"`}},
		// A granted secret goes only to its hosts.
		{secret, `{"url":"http://evil.example/x","auth":{"type":"bearer","token_key":"SCOPED"}}`, errcode.HTTPSecretRefused, []string{`"SCOPED"`, `"evil.example"`, "secrets.SCOPED.hosts"}},
		{secret, `"nope"`, errcode.HTTPInvocationInvalid, []string{"invocation"}},
	} {
		_, err := c.inv.Register(context.Background(), "x::f", json.RawMessage(c.in))
		ce := errcode.As(err, "")
		if err == nil || ce.Code != c.code {
			t.Errorf("%s: %v, want %s", c.in, err, c.code)
			continue
		}
		for _, m := range c.mentioned {
			if !strings.Contains(ce.Message, m) {
				t.Errorf("%s: %q does not mention %q", c.in, ce.Message, m)
			}
		}
		if strings.Contains(ce.Message, "s3cret") {
			t.Errorf("%s: the secret is in %q", c.in, ce.Message)
		}
	}
	for _, key := range []string{"SET", "RENAMED"} {
		f, err := secret.Register(context.Background(), "x::f", json.RawMessage(`{"url":"http://a.test","auth":{"type":"bearer","token_key":"`+key+`"}}`))
		if err != nil || f.secret != "s3cret" {
			t.Errorf("%s: %v", key, err)
		}
	}
}

// The dialled address is checked too: a name that passed registration cannot reach a private
// address later (DNS rebinding), while block_private_ips false lets it through.
func TestDialCheck(t *testing.T) {
	strict, _ := New(DefaultSecurity(), nil)
	open, _ := New(Security{URLAllowlist: []string{"*"}}, nil)
	for _, a := range []string{"127.0.0.1:80", "[::1]:80", "192.168.1.1:443", "169.254.169.254:80", "[::ffff:10.0.0.1]:80"} {
		if err := strict.checkDial("tcp", a, nil); err == nil || !strings.Contains(err.Error(), "block_private_ips") {
			t.Errorf("%s: %v", a, err)
		}
		if err := open.checkDial("tcp", a, nil); err != nil {
			t.Errorf("%s with block_private_ips false: %v", a, err)
		}
	}
	if err := strict.checkDial("tcp", "8.8.8.8:443", nil); err != nil {
		t.Error(err)
	}
	// A request whose URL check passed but whose dial reaches loopback fails at the dial.
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the request reached the server") }))
	defer srv.Close()
	strict.sec.RequireHTTPS = false
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	if _, err := strict.client.Do(req); err == nil || !strings.Contains(err.Error(), "private address blocked") {
		t.Errorf("dial to %s: %v", srv.URL, err)
	}
	for _, ip := range []string{"8.8.8.8", "2001:4860:4860::8888"} {
		if Private(netip.MustParseAddr(ip)) {
			t.Errorf("%s counted as private", ip)
		}
	}
}

func TestNewRefusesBadPattern(t *testing.T) {
	if _, err := New(Security{URLAllowlist: []string{"["}}, nil); errcode.As(err, "").Code != errcode.ConfigInvalid {
		t.Errorf("got %v", err)
	}
}

// Every non-public range block_private_ips names is refused, whether written as IPv4 or carried
// in an IPv6 form that reaches it (NAT64, IPv4-mapped, IPv4-compatible); public addresses in the
// same forms pass.
func TestPrivateRanges(t *testing.T) {
	blocked := []string{
		"100.64.0.1", "100.100.100.200", "100.127.255.254", // carrier-grade NAT, cloud metadata
		"198.18.0.1", "198.19.255.255", // benchmarking
		"240.0.0.1", "255.255.255.254", "255.255.255.255", // reserved, broadcast
		"0.0.0.0", "0.1.2.3", // this network
		"192.0.0.8", "192.0.2.1", "198.51.100.1", "203.0.113.1", // protocol, documentation
		"fec0::1", "feff::1", // site-local
		"::ffff:0:7f00:1", "::ffff:0:808:808", // IPv4-translated (SIIT)
		"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::a00:1", "64:ff9b::6464:64c8", // NAT64 to private
		"64:ff9b:1::7f00:1", "64:ff9b:1:2::c0a8:101", // local-use NAT64
		"::ffff:127.0.0.1", "::ffff:100.100.100.200", // IPv4-mapped
		"::127.0.0.1", "::10.0.0.1", "::100.100.100.200", "::", "::1", // IPv4-compatible
		"2001:db8::1", "100::1", "fe80::1%eth0",
	}
	for _, s := range blocked {
		if !Private(netip.MustParseAddr(s)) {
			t.Errorf("%s is not refused", s)
		}
	}
	public := []string{"8.8.8.8", "100.63.255.255", "100.128.0.1", "198.17.255.255", "198.20.0.1",
		"2001:4860:4860::8888", "64:ff9b::808:808", "::ffff:8.8.8.8", "::8.8.8.8", "64:ff9b:1::808:808"}
	for _, s := range public {
		if Private(netip.MustParseAddr(s)) {
			t.Errorf("%s counted as private", s)
		}
	}
	// The dial check judges the same way, so a name resolving to one of them is not reached.
	strict := open(t, nil)
	strict.sec.BlockPrivateIPs = true
	for _, a := range []string{"100.100.100.200:80", "[64:ff9b::7f00:1]:443", "[::ffff:0:a00:1]:80"} {
		if err := strict.checkDial("tcp", a, nil); err == nil {
			t.Errorf("dial to %s allowed", a)
		}
	}
}
