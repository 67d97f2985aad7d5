package engineconf

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/iii-go/iii/engine/config"
)

func tokenFile(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/token"
	if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRenderIsAValidEngineConfig(t *testing.T) {
	tok, owner := tokenFile(t), tokenFile(t)
	grace := int64(2000)
	out, err := Render(Input{
		URL: "ws://127.0.0.1:50123", GraceMS: &grace,
		Workers:     map[string]any{"configuration": map[string]any{"adapter": map[string]any{"name": "fs"}}, "iii-http-functions": map[string]any{}},
		WorkerOrder: []string{"configuration", "iii-http-functions"},
		Namespace:   "shop", TokenFile: tok, OwnerTokenFile: owner,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(out, func(string) (string, bool) { return "", false }, "/")
	if err != nil {
		t.Fatalf("engine rejects the rendered config: %v\n%s", err, out)
	}
	if c.Main().Port != 50123 || c.Main().Host != "127.0.0.1" || c.GraceMS != 2000 {
		t.Errorf("listener %s:%d grace %d", c.Main().Host, c.Main().Port, c.GraceMS)
	}
	if c.Sandbox == nil || c.Sandbox.Adapter != "sandbox-libkrun" || c.Sandbox.Namespace != "shop" {
		t.Errorf("sandbox binding = %+v, want sandbox-libkrun in shop", c.Sandbox)
	}
	if len(c.Namespaces) != 1 || c.Namespaces[0].Name != "shop" || c.Namespaces[0].TokenFile != tok || c.Namespaces[0].OwnerTokenFile != owner {
		t.Errorf("namespaces = %+v", c.Namespaces)
	}
	if strings.Contains(string(out), "secret") {
		t.Errorf("config carries a token value:\n%s", out)
	}
}

func TestRenderKeepsDeclaredListenerAndCustomBinding(t *testing.T) {
	out, err := Render(Input{
		URL:         "ws://127.0.0.1:50124",
		Workers:     map[string]any{"iii-worker-manager": map[string]any{"handshake_timeout_ms": 5000}},
		WorkerOrder: []string{"iii-worker-manager"},
		Namespace:   "dev", TokenFile: tokenFile(t), OwnerTokenFile: tokenFile(t), SandboxAdapter: "my-adapter", SandboxNamespace: "vms",
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(out, os.LookupEnv, "/")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if c.Main().Port != 50124 || c.Main().HandshakeTimeoutMS != 5000 {
		t.Errorf("listener port %d handshake %d", c.Main().Port, c.Main().HandshakeTimeoutMS)
	}
	if c.Sandbox.Adapter != "my-adapter" || c.Sandbox.Namespace != "vms" {
		t.Errorf("sandbox = %+v", c.Sandbox)
	}
}

func TestHostPort(t *testing.T) {
	if _, _, err := HostPort("http://x:1"); err == nil {
		t.Error("http URL accepted")
	}
	if h, p, err := HostPort("ws://localhost"); err != nil || h != "localhost" || p != 80 {
		t.Errorf("ws://localhost = %s %d %v", h, p, err)
	}
}

func TestDefaultNamespaceTokenGoesToTheOwnerNamespace(t *testing.T) {
	tok, owner := tokenFile(t), tokenFile(t)
	out, err := Render(Input{URL: "ws://127.0.0.1:50125", Namespace: "default", TokenFile: tok, OwnerTokenFile: owner})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(out, os.LookupEnv, "/")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(c.Namespaces) != 1 || c.Namespaces[0].Name != OwnerNamespace || c.Namespaces[0].OwnerTokenFile != owner || c.Namespaces[0].TokenFile != tok {
		t.Errorf("namespaces = %+v", c.Namespaces)
	}
	if c.Sandbox.Namespace != "default" {
		t.Errorf("sandbox namespace %q", c.Sandbox.Namespace)
	}
}

// The grant Compose asks for on an attached engine is a valid engine config that gives the owner
// token owner rights, for a project in its own namespace and for one in default.
func TestOwnerGrantIsAValidEngineConfig(t *testing.T) {
	proj, owner := tokenFile(t), tokenFile(t)
	for _, tc := range []struct{ ns, name, token string }{{"shop", "shop", proj}, {"default", OwnerNamespace + "-", proj}} {
		text := OwnerGrant(tc.ns, proj, owner)
		c, err := config.Parse([]byte(text), os.LookupEnv, "/")
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.ns, err, text)
		}
		if len(c.Namespaces) != 1 || !strings.HasPrefix(c.Namespaces[0].Name, tc.name) || c.Namespaces[0].TokenFile != tc.token || c.Namespaces[0].OwnerTokenFile != owner {
			t.Errorf("%s: namespaces = %+v", tc.ns, c.Namespaces)
		}
	}
	if OwnerGrant("default", proj, owner) == OwnerGrant("default", proj, proj) {
		t.Error("two projects in default get the same namespace name")
	}
	if got := OwnerGrant("shop", "/a b/token", "/a b/owner-token"); !strings.Contains(got, `token_file: "/a b/token"`) {
		t.Errorf("a path with a space is not quoted:\n%s", got)
	}
}

// TestRenderPutsTheMainListenerFirst: a further listener (iii-worker-manager#<name>, with its
// rbac: block) declared before the plain entry does not become the engine's main listener,
// which stays where engine.url points.
func TestRenderPutsTheMainListenerFirst(t *testing.T) {
	out, err := Render(Input{
		URL: "ws://127.0.0.1:50125",
		Workers: map[string]any{
			"iii-worker-manager#public": map[string]any{"port": 50126, "rbac": map[string]any{"auth_function_id": "my::auth"}},
			"iii-worker-manager":        map[string]any{"handshake_timeout_ms": 4000},
		},
		WorkerOrder: []string{"iii-worker-manager#public", "iii-worker-manager"},
		Namespace:   "dev", TokenFile: tokenFile(t), OwnerTokenFile: tokenFile(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(out, os.LookupEnv, "/")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(c.Listeners) != 2 || c.Main().Port != 50125 || c.Main().HandshakeTimeoutMS != 4000 || c.Main().RBAC != nil {
		t.Fatalf("listeners %+v\n%s", c.Listeners, out)
	}
	if pub := c.Listeners[1]; pub.Name != "iii-worker-manager#public" || pub.Port != 50126 || pub.RBAC == nil || pub.RBAC.AuthFunctionID != "my::auth" {
		t.Errorf("public listener %+v", pub)
	}
}

// TestDaemonNamespaceIsProtectedToo: a daemon namespace other than the project's (and than
// default) is protected by the same project and owner tokens; default and an equal one add
// nothing.
func TestDaemonNamespaceIsProtectedToo(t *testing.T) {
	tok, owner := tokenFile(t), tokenFile(t)
	for _, c := range []struct {
		project, daemon string
		want            []string
	}{
		{"default", "sdk-config-test", []string{OwnerNamespace, "sdk-config-test"}},
		{"shop", "ops", []string{"shop", "ops"}},
		{"shop", "shop", []string{"shop"}},
		{"shop", "default", []string{"shop"}},
	} {
		out, err := Render(Input{URL: "ws://127.0.0.1:50125", Namespace: c.project, DaemonNamespace: c.daemon, TokenFile: tok, OwnerTokenFile: owner})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse(out, os.LookupEnv, "/")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var got []string
		for _, n := range cfg.Namespaces {
			got = append(got, n.Name)
			if n.TokenFile != tok || n.OwnerTokenFile != owner {
				t.Errorf("%s/%s: namespace %s has tokens %q %q", c.project, c.daemon, n.Name, n.TokenFile, n.OwnerTokenFile)
			}
		}
		slices.Sort(got)
		slices.Sort(c.want)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s/%s: namespaces %v, want %v", c.project, c.daemon, got, c.want)
		}
	}
}
