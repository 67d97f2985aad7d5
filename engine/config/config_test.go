package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iii-go/iii/internal/base/errcode"
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
    config: {port: "${SPORT:3200}", host: 0.0.0.0, auth_function: my::auth, adapter: {name: kv, config: {store_method: file_based, file_path: ./data/streams}},
      allowed_origins: ["https://app.example"], join_timeout_ms: 5000, idle_timeout_ms: 60000, max_connections: 10, max_connections_per_address: 2}
  - name: iii-http-functions
    config:
      security: {url_allowlist: ["127.0.0.1", "*.example.com"], block_private_ips: false, require_https: ${HTTPS:false}}
      secrets: {HOOK: {hosts: ["127.0.0.1"]}, GH: {env: GITHUB_TOKEN, hosts: ["api.github.com", "*.github.com"]}}
sandbox:
  adapter: mybox
namespaces:
  - {name: proj, token_file: tok, owner_token_file: owner}
`
	got, err := Parse([]byte(in), env(map[string]string{"PORT": "5000"}), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{GraceMS: 250, ConfigDir: "/tmp/cfg",
		Listeners: []Listener{{Name: "iii-worker-manager", Line: 3, Host: "0.0.0.0", Port: 5000, HandshakeTimeoutMS: 2500,
			AllowedOrigins: []string{"http://localhost:3000", "*.example.com"}}},
		Sandbox:    &Sandbox{Adapter: "mybox", Namespace: "default"},
		Namespaces: []Namespace{{Name: "proj", TokenFile: filepath.Join(dir, "tok"), OwnerTokenFile: filepath.Join(dir, "owner")}},
		Declared:   []string{"iii-worker-manager", "configuration", "iii-stream", "iii-http-functions"},
		HTTPSecurity: HTTPSecurity{URLAllowlist: []string{"127.0.0.1", "*.example.com"}, Secrets: map[string]HTTPSecret{
			"HOOK": {Env: "HOOK", Hosts: []string{"127.0.0.1"}}, "GH": {Env: "GITHUB_TOKEN", Hosts: []string{"api.github.com", "*.github.com"}}}},
		Stream: &Stream{Host: "0.0.0.0", Port: 3200, AuthFunction: "my::auth", FilePath: "./data/streams",
			AllowedOrigins: []string{"https://app.example"}, JoinTimeoutMS: 5000, IdleTimeoutMS: 60000, MaxConnections: 10, MaxConnectionsPerAddress: 2}}
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
		{"cluster: {nats: {}}\n", errcode.ConfigInvalid, "cluster.nats.url is required"},
		{"cluster: {nats: {url: 'http://x'}}\n", errcode.ConfigInvalid, `"http://x" is not a nats://`},
		{"cluster: {nats: {url: 'nats://a:4222'}, name: x}\n", errcode.ConfigInvalid, `unknown key "name" in cluster`},
		// A cluster admits only engines: the shared key is required, and a NATS link without
		// credentials is refused unless the config says insecure: true on purpose.
		{"cluster: {nats: {url: 'nats://a:4222', creds_file: c}}\n", errcode.ConfigInvalid, "cluster.key_file is required"},
		{"cluster: {key_file: k, nats: {url: 'nats://a:4222'}}\n", errcode.ConfigInvalid, "cluster.nats.url is given without credentials (creds_file, nkey_file, or tls_cert_file and tls_key_file); set cluster.insecure: true"},
		{"cluster: {key_file: k, insecure: false, nats: {url: 'nats://a:4222'}}\n", errcode.ConfigInvalid, "cluster.nats.url is given without credentials"},
		{"cluster: {key_file: k, insecure: yes, nats: {url: 'nats://a:4222'}}\n", errcode.ConfigInvalid, "cluster.insecure must be true or false"},
		{"cluster: {key_file: k, nats: {url: 'nats://a:4222', tls_cert_file: c}}\n", errcode.ConfigInvalid, "tls_cert_file and tls_key_file go together"},
		{"cluster: {key_file: k, nats: {url: 'nats://a:4222', token: t}}\n", errcode.ConfigInvalid, `unknown key "token" in cluster.nats`},
		// An rbac: block is parsed strictly: a key iii does not define, or a filter it cannot
		// read, refuses the start instead of widening or narrowing the gate.
		{"workers:\n  - name: iii-worker-manager\n    config: {rbac: {default: deny}}\n", errcode.ConfigInvalid,
			`line 3: unknown key "default" in iii-worker-manager rbac; allowed: auth_function_id, expose_functions, on_function_registration_function_id`},
		{"workers:\n  - name: iii-worker-manager\n    config: {rbac: {expose_functions: ['api::*']}}\n", errcode.ConfigInvalid, `expected match("pattern")`},
		{"workers:\n  - name: iii-worker-manager\n    config: {rbac: {expose_functions: [{match: 'a', namesapce: b}]}}\n", errcode.ConfigInvalid, `unknown key "namesapce" in an expose_functions filter`},
		{"workers:\n  - name: iii-worker-manager\n    config: {rbac: {expose_functions: x}}\n", errcode.ConfigInvalid, "must be a list of filters"},
		{"workers:\n  - name: iii-worker-manager\n    config: {rbac: {auth_function_id: ''}}\n", errcode.ConfigInvalid, "auth_function_id must name a function"},
		{"workers:\n  - name: iii-worker-manager\n    config: {middleware_function_id: ''}\n", errcode.ConfigInvalid, "middleware_function_id must name a function"},
		// Two listeners on one port: refused, naming both lines; a second entry keeps the default
		// port unless it sets one.
		{"workers:\n  - name: iii-worker-manager\n    config: {port: 47002}\n  - name: iii-worker-manager#rbac\n    config: {port: 47002}\n",
			errcode.ConfigInvalid, `line 4: listener "iii-worker-manager#rbac": port 47002 is already the port of listener "iii-worker-manager" on line 2`},
		{"workers:\n  - name: iii-worker-manager\n  - name: iii-worker-manager\n", errcode.ConfigInvalid, `line 3: listener "iii-worker-manager": port 49134 is already the port`},
		// A second instance of another engine worker is still refused (review row B32), also
		// across workers: and modules:.
		{"workers:\n  - name: configuration#two\n", errcode.ConfigUnsupported, `"configuration#two" is a second instance of configuration`},
		{"modules:\n  - name: configuration\nworkers:\n  - name: iii-stream\n  - name: configuration\n", errcode.ConfigUnsupported,
			`line 5: workers[1]: a second "configuration" entry, after the one on line 2, is a second instance of configuration: this engine runs one configuration`},
		{"workers:\n  - name: configuration\n    config: {ttl_seconds: 1}\n", errcode.ConfigUnsupported, "ttl_seconds: 1"},
		{"workers:\n  - name: iii-stream\n    config: {anything_at_all: [1]}\n", errcode.ConfigInvalid, `line 3: unknown key "anything_at_all" in iii-stream config; allowed: host, port, adapter, auth_function, allowed_origins, join_timeout_ms, idle_timeout_ms, max_connections, max_connections_per_address`},
		{"workers:\n  - name: iii-stream\n    config: {max_connections: -1}\n", errcode.ConfigInvalid, `line 3: iii-stream config: max_connections is -1`},
		{"workers:\n  - name: iii-stream\n    config: {allowed_origins: \"*\"}\n", errcode.ConfigInvalid, `allowed_origins must be a list`},
		{"workers:\n  - name: iii-stream\n    config:\n      adapter: {name: redis, config: {redis_url: 'redis://x'}}\n", errcode.ConfigUnsupported, `line 4: iii-stream adapter: name "redis"`},
		{"workers:\n  - name: iii-stream\n    config: {adapter: {name: bridge}}\n", errcode.ConfigUnsupported, `iii-stream adapter: name "bridge"`},
		{"workers:\n  - name: iii-stream\n    config: {adapter: {config: {}}}\n", errcode.ConfigInvalid, "name is required"},
		{"workers:\n  - name: iii-stream\n    config: {adapter: {name: kv, config: {channel_size: 256}}}\n", errcode.ConfigUnsupported, `line 3: iii-stream kv adapter config: channel_size`},
		{"workers:\n  - name: iii-stream\n    config: {adapter: {name: kv, config: {save_interval_ms: 5}}}\n", errcode.ConfigInvalid, `save_interval_ms 5`},
		{"workers:\n  - name: iii-stream\n    config: {adapter: {name: kv, config: {store_method: tape}}}\n", errcode.ConfigInvalid, `store_method "tape"`},
		{"workers:\n  - name: iii-stream\n    config: {port: 70000}\n", errcode.ConfigInvalid, "port 70000 is out of range"},
		{"workers:\n  - name: iii-http-functions\n    config: {bogus_key: 1}\n", errcode.ConfigInvalid, `unknown key "bogus_key" in iii-http-functions config; allowed: security`},
		{"workers:\n  - name: iii-http-functions\n    config: {security: {allow: [x]}}\n", errcode.ConfigInvalid, `unknown key "allow" in iii-http-functions security; allowed: url_allowlist, block_private_ips, require_https`},
		{"workers:\n  - name: iii-http-functions\n    config: {security: {url_allowlist: x}}\n", errcode.ConfigInvalid, "must be a list of host patterns"},
		{"workers:\n  - name: iii-http-functions\n    config: {security: {url_allowlist: ['[']}}\n", errcode.ConfigInvalid, "not a valid host pattern"},
		{"workers:\n  - name: iii-http-functions\n    config: {security: {require_https: maybe}}\n", errcode.ConfigInvalid, "require_https must be true or false"},
		{"workers:\n  - name: iii-http-functions\n    config: {secrets: [A]}\n", errcode.ConfigInvalid, "secrets must be a mapping"},
		{"workers:\n  - name: iii-http-functions\n    config: {secrets: {A: {env: A}}}\n", errcode.ConfigInvalid, "iii-http-functions secrets.A needs hosts"},
		{"workers:\n  - name: iii-http-functions\n    config: {secrets: {A: {hosts: []}}}\n", errcode.ConfigInvalid, "secrets.A needs hosts"},
		{"workers:\n  - name: iii-http-functions\n    config: {secrets: {A: {hosts: ['[']}}}\n", errcode.ConfigInvalid, `secrets.A.hosts: "[" is not a valid host pattern`},
		{"workers:\n  - name: iii-http-functions\n    config: {secrets: {A: {hosts: [x], url: y}}}\n", errcode.ConfigInvalid, `unknown key "url" in iii-http-functions secrets.A`},
		{"workers:\n  - name: iii-http-functions\n    config: {secrets: {A: {env: '', hosts: [x]}}}\n", errcode.ConfigInvalid, "secrets.A.env must name an environment variable"},
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

// TestParseListeners: every iii-worker-manager entry is a listener, in file order, with its
// own settings and rbac: block; the first is the main one.
func TestParseListeners(t *testing.T) {
	in := `workers:
  - name: iii-worker-manager
    config: {port: 47001}
  - name: configuration
  - name: iii-worker-manager#public
    config:
      host: 0.0.0.0
      port: 47002
      handshake_timeout_ms: 500
      middleware_function_id: my::mw
      rbac:
        auth_function_id: my::auth
        on_function_registration_function_id: my::on-fn
        on_trigger_registration_function_id: my::on-trig
        on_trigger_type_registration_function_id: my::on-tt
        expose_functions:
          - match("api::*")
          - {match: "svc::*", namespace: orders}
          - metadata: {public: true}
  - name: iii-worker-manager
    config: {port: 47003, rbac: {}}
`
	c, err := Parse([]byte(in), env(nil), ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Listeners) != 3 || c.Main().Port != 47001 || c.Main().RBAC != nil || c.Main().Line != 2 {
		t.Fatalf("listeners %+v", c.Listeners)
	}
	pub := c.Listeners[1]
	if pub.Name != "iii-worker-manager#public" || pub.Host != "0.0.0.0" || pub.HandshakeTimeoutMS != 500 || pub.MiddlewareFunctionID != "my::mw" || pub.Line != 5 {
		t.Errorf("public listener %+v", pub)
	}
	r := pub.RBAC
	if r == nil || r.AuthFunctionID != "my::auth" || r.OnFunctionRegistration != "my::on-fn" || r.OnTriggerRegistration != "my::on-trig" ||
		r.OnTriggerTypeRegistration != "my::on-tt" || len(r.Expose) != 3 || r.Expose[1].Namespace != "orders" || r.Expose[2].Metadata["public"].Exact != true {
		t.Errorf("rbac %+v", r)
	}
	if third := c.Listeners[2]; third.RBAC == nil || len(third.RBAC.Expose) != 0 || third.Host != DefaultHost {
		t.Errorf("an empty rbac: block exposes nothing: %+v", third)
	}
}

// TestSubstitutedValuesKeepTheShape: a variable's value is one scalar, whatever it holds;
// text substitution made HOST below a second key of the listener (and PORT a comment).
func TestSubstitutedValuesKeepTheShape(t *testing.T) {
	in := "workers:\n  - name: iii-worker-manager\n    config: {host: ${HOST}, port: ${PORT:3111}}\n  - name: iii-stream\n    config:\n      auth_function: ${AUTH}\n"
	got, err := Parse([]byte(in), env(map[string]string{"HOST": "h\n      port: 1", "AUTH": "a: b # c"}), ".")
	if err != nil {
		t.Fatal(err)
	}
	if l := got.Main(); l.Host != "h\n      port: 1" || l.Port != 3111 {
		t.Errorf("listener %+v", l)
	}
	if got.Stream == nil || got.Stream.AuthFunction != "a: b # c" {
		t.Errorf("stream %+v", got.Stream)
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
		if len(c.Listeners) == 0 {
			t.Fatal("accepted a config without a listener")
		}
		ports := map[int]bool{}
		for _, l := range c.Listeners {
			if l.Port < 0 || l.Port > 65535 || l.Host == "" || l.HandshakeTimeoutMS <= 0 || l.Port != 0 && ports[l.Port] {
				t.Fatalf("accepted a bad listener %+v", l)
			}
			ports[l.Port] = true
		}
		if c.Sandbox != nil && (c.Sandbox.Adapter == "" || c.Sandbox.Namespace == "") {
			t.Fatalf("accepted an empty binding %+v", c.Sandbox)
		}
	})
}

// Declared bare, iii-stream is served with iii's port and this engine's loopback host; not
// declared, it is not served at all.
func TestParseCluster(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	c, err := Parse([]byte("cluster:\n  key_file: cluster.key\n  nats: {url: 'nats://10.0.0.5:4222, nats://10.0.0.6:4222', creds_file: nats.creds}\n"), none, "/etc/iii")
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster == nil || c.Cluster.URL != "nats://10.0.0.5:4222, nats://10.0.0.6:4222" || c.Cluster.CredsFile != "/etc/iii/nats.creds" ||
		c.Cluster.KeyFile != "/etc/iii/cluster.key" || c.Cluster.Insecure {
		t.Fatalf("%+v", c.Cluster)
	}
	c, err = Parse([]byte("cluster:\n  key_file: /k\n  nats: {url: 'tls://h:4222', nkey_file: seed.nk, tls_cert_file: c.pem, tls_key_file: k.pem, tls_ca_file: ca.pem}\n"), none, "/etc/iii")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Cluster{URL: "tls://h:4222", NkeyFile: "/etc/iii/seed.nk", TLSCertFile: "/etc/iii/c.pem", TLSKeyFile: "/etc/iii/k.pem", TLSCAFile: "/etc/iii/ca.pem", KeyFile: "/k"}); *c.Cluster != want {
		t.Fatalf("%+v", c.Cluster)
	}
	c, err = Parse([]byte("cluster:\n  key_file: k\n  insecure: true\n  nats: {url: 'nats://127.0.0.1:4222'}\n"), none, "/etc/iii")
	if err != nil || !c.Cluster.Insecure {
		t.Fatalf("%+v %v", c.Cluster, err)
	}
}

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
