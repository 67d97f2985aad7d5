package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iii-go/iii/engine/errcode"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseValid(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tok"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := `registration_namespace_grace_ms: ${GRACE:250}
workers:
  - name: iii-worker-manager
    config: {host: ${HOST:0.0.0.0}, port: ${PORT}, handshake_timeout_ms: 2500, allowed_origins: ["http://localhost:3000", "*.example.com"]}
  - name: configuration
    config: {adapter: {name: fs, config: {directory: /tmp/cfg}}, ttl_seconds: 0}
  - name: iii-stream
    config: {port: "${SPORT:3200}", host: 0.0.0.0, auth_function: my::auth, adapter: {name: kv, config: {store_method: file_based, file_path: ./data/streams}}}
  - name: iii-http-functions
    config: {security: {url_allowlist: ["127.0.0.1", "*.example.com"], block_private_ips: false, require_https: ${HTTPS:false}}}
sandbox:
  adapter: mybox
namespaces:
  - {name: proj, token_file: tok, owner_token_file: owner}
`
	got, err := Parse([]byte(in), env(map[string]string{"PORT": "5000"}), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{GraceMS: 250, Host: "0.0.0.0", Port: 5000, HandshakeTimeoutMS: 2500, ConfigDir: "/tmp/cfg",
		AllowedOrigins: []string{"http://localhost:3000", "*.example.com"},
		Sandbox:        &Sandbox{Adapter: "mybox", Namespace: "default"},
		Namespaces:     []Namespace{{Name: "proj", TokenFile: filepath.Join(dir, "tok"), OwnerTokenFile: filepath.Join(dir, "owner")}},
		Declared:       []string{"iii-worker-manager", "configuration", "iii-stream", "iii-http-functions"},
		HTTPSecurity:   HTTPSecurity{URLAllowlist: []string{"127.0.0.1", "*.example.com"}},
		Stream:         &Stream{Host: "0.0.0.0", Port: 3200, AuthFunction: "my::auth", FilePath: "./data/streams"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Error(d)
	}
}

func TestParseEmptyAndDefaults(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "workers: []\n"} {
		got, err := Parse([]byte(in), env(nil), ".")
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if d := cmp.Diff(Default(), got); d != "" {
			t.Errorf("%q: %s", in, d)
		}
	}
}

func TestParseErrors(t *testing.T) {
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "open"), []byte("x"), 0o644)
	cases := []struct{ in, code, msg string }{
		{"foo: 1\n", errcode.ConfigInvalid, `line 1: unknown key "foo"`},
		{"workers:\n", errcode.ConfigInvalid, "workers: must be a list"},
		{"workers: {}\n", errcode.ConfigInvalid, "must be a list of"},
		{"workers:\n  - name: configuration\n    confg: {}\n", errcode.ConfigInvalid, `line 3: unknown key "confg" in workers[0]`},
		{"workers:\n  - name: iii-sandbox\n  - name: state\n", errcode.UnsupportedConfigWorkers, "- 'state' -> move to worker-compose.yaml as 'state'"},
		{"modules:\n  - name: iii-sandbox\n", errcode.UnsupportedConfigWorkers, "- 'iii-sandbox' -> remove this entry"},
		{"workers:\n  - name: configuration\n    image: x\n", errcode.ConfigInvalid, "'image' is not allowed"},
		{"port: ${NOPE}\n", errcode.ConfigInvalid, "NOPE (line 1)"},
		{"sandbox:\n  namespace: ''\n", errcode.ConfigInvalid, "sandbox.namespace must not be empty"},
		{"workers:\n  - name: iii-worker-manager\n    config: {port: 70000}\n", errcode.ConfigInvalid, "out of range"},
		{"namespaces:\n  - {name: p, token_file: open}\n", errcode.ConfigInvalid, "must have mode 0600"},
		{"namespaces:\n  - {name: default, token_file: open}\n", errcode.ConfigInvalid, "default namespace cannot be token-protected"},
		{"namespaces:\n  - {name: p, token_file: missing}\n", errcode.ConfigInvalid, "of namespace \"p\": no such file"},
		{"workers: [\n", errcode.ConfigInvalid, "not valid YAML"},
		{"workers: []\nworkers: []\n", errcode.ConfigInvalid, `key "workers" appears twice`},
		// Keys this engine parses but does not act on are refused, naming the key (review row #8).
		{"workers:\n  - name: iii-worker-manager\n    config: {rbac: {default: deny}}\n", errcode.ConfigUnsupported, `line 3: iii-worker-manager config: key "rbac"`},
		{"workers:\n  - name: iii-worker-manager\n    config: {middleware_function_id: auth::check}\n", errcode.ConfigUnsupported, `key "middleware_function_id"`},
		{"workers:\n  - name: iii-worker-manager#rbac\n    config: {port: 49135}\n", errcode.ConfigUnsupported, `"iii-worker-manager#rbac" is a second instance`},
		// A second entry of an engine worker would be a second instance: refused, naming both lines
		// (review row B32), also across workers: and modules:.
		{"workers:\n  - name: iii-worker-manager\n    config: {port: 47002}\n  - name: iii-worker-manager\n    config: {port: 47003}\n",
			errcode.ConfigUnsupported, `line 4: workers[1]: a second "iii-worker-manager" entry, after the one on line 2, is a second instance of iii-worker-manager: only one listener is supported today`},
		{"modules:\n  - name: configuration\nworkers:\n  - name: iii-stream\n  - name: configuration\n", errcode.ConfigUnsupported,
			`line 5: workers[1]: a second "configuration" entry, after the one on line 2, is a second instance of configuration: this engine runs one configuration`},
		{"workers:\n  - name: configuration\n    config: {ttl_seconds: 1}\n", errcode.ConfigUnsupported, "ttl_seconds: 1"},
		{"workers:\n  - name: iii-stream\n    config: {anything_at_all: [1]}\n", errcode.ConfigInvalid, `line 3: unknown key "anything_at_all" in iii-stream config; allowed: host, port, adapter, auth_function`},
		{"workers:\n  - name: iii-stream\n    config:\n      adapter: {name: redis, config: {redis_url: 'redis://x'}}\n", errcode.ConfigUnsupported, `line 4: iii-stream adapter: name "redis"`},
		{"workers:\n  - name: iii-stream\n    config: {adapter: {name: bridge}}\n", errcode.ConfigUnsupported, `iii-stream adapter: name "bridge"`},
		{"workers:\n  - name: iii-stream\n    config: {adapter: {config: {}}}\n", errcode.ConfigInvalid, "name is required"},
		{"workers:\n  - name: iii-stream\n    config: {adapter: {name: kv, config: {store_method: tape}}}\n", errcode.ConfigInvalid, `store_method "tape"`},
		{"workers:\n  - name: iii-stream\n    config: {port: 70000}\n", errcode.ConfigInvalid, "port 70000 is out of range"},
		{"workers:\n  - name: iii-http-functions\n    config: {bogus_key: 1}\n", errcode.ConfigInvalid, `unknown key "bogus_key" in iii-http-functions config; allowed: security`},
		{"workers:\n  - name: iii-http-functions\n    config: {security: {allow: [x]}}\n", errcode.ConfigInvalid, `unknown key "allow" in iii-http-functions security; allowed: url_allowlist, block_private_ips, require_https`},
		{"workers:\n  - name: iii-http-functions\n    config: {security: {url_allowlist: x}}\n", errcode.ConfigInvalid, "must be a list of host patterns"},
		{"workers:\n  - name: iii-http-functions\n    config: {security: {url_allowlist: ['[']}}\n", errcode.ConfigInvalid, "not a valid host pattern"},
		{"workers:\n  - name: iii-http-functions\n    config: {security: {require_https: maybe}}\n", errcode.ConfigInvalid, "require_https must be true or false"},
		{"workers:\n  - name: iii-worker-manager\n    config: {handshake_timeout_ms: 0}\n", errcode.ConfigInvalid, "handshake_timeout_ms must be positive"},
		{"workers:\n  - name: iii-worker-manager\n    config: {allowed_origins: ['*']}\n", errcode.ConfigInvalid, "every web page"},
		{"workers:\n  - name: iii-worker-manager\n    config: {allowed_origins: ['[']}\n", errcode.ConfigInvalid, "not a valid pattern"},
		{"workers:\n  - name: iii-worker-manager\n    config: {allowed_origins: x}\n", errcode.ConfigInvalid, "must be a list"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.in), env(nil), dir)
		var ce *errcode.Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: got %v, want a config error", c.in, err)
			continue
		}
		if ce.Code != c.code || !strings.Contains(ce.Message, c.msg) {
			t.Errorf("%q: got [%s] %s, want [%s] containing %q", c.in, ce.Code, ce.Message, c.code, c.msg)
		}
	}
}

func TestExpand(t *testing.T) {
	got, err := Expand([]byte("a: ${A}\nb: ${B:dflt}\nc: ${C:}\nd: $NOT ${A:x}"), env(map[string]string{"A": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff("a: 1\nb: dflt\nc: \nd: $NOT 1", string(got)); d != "" {
		t.Error(d)
	}
}

// FuzzParse: no input makes Parse panic; whatever it accepts has a usable listener and binding.
func FuzzParse(f *testing.F) {
	f.Add([]byte("workers:\n  - name: iii-worker-manager\n    config: {port: ${P:1}}\nsandbox: {}\n"))
	f.Add([]byte("modules:\n  - name: iii-sandbox\n"))
	f.Add([]byte("registration_namespace_grace_ms: 5\nnamespaces: []\n"))
	f.Add([]byte("workers: [{name: configuration, config: {adapter: {name: fs, config: {directory: x}}}}]"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b, env(map[string]string{"P": "7"}), dir)
		if err != nil {
			var ce *errcode.Error
			if !errors.As(err, &ce) || ce.Code == "" || ce.Message == "" {
				t.Fatalf("error without code: %v", err)
			}
			return
		}
		if c.Port < 0 || c.Port > 65535 || c.Host == "" {
			t.Fatalf("accepted a bad listener %q:%d", c.Host, c.Port)
		}
		if c.Sandbox != nil && (c.Sandbox.Adapter == "" || c.Sandbox.Namespace == "") {
			t.Fatalf("accepted an empty binding %+v", c.Sandbox)
		}
	})
}

// Declared bare, iii-stream is served with iii's port and this engine's loopback host; not
// declared, it is not served at all.
func TestParseStreamDefaults(t *testing.T) {
	got, err := Parse([]byte("workers:\n  - name: iii-stream\n"), env(nil), ".")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&Stream{Host: "127.0.0.1", Port: 3112}, got.Stream); d != "" {
		t.Error(d)
	}
	got, err = Parse([]byte("workers:\n  - name: iii-stream\n    config: {adapter: {name: kv, config: {store_method: in_memory}}}\n"), env(nil), ".")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Stream.Memory {
		t.Errorf("store_method in_memory: %+v", got.Stream)
	}
	if got, _ = Parse([]byte("workers: []\n"), env(nil), "."); got.Stream != nil {
		t.Errorf("not declared: %+v", got.Stream)
	}
}
