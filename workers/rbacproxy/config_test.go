package rbacproxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/wconfig"
)

func load(t *testing.T, yaml string) (Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	if _, err := wconfig.Load(path, &c, os.LookupEnv); err != nil {
		return c, err
	}
	return c, c.Check(os.Getenv(protocol.EnvURL))
}

func TestConfig(t *testing.T) {
	t.Setenv("III_URL", "ws://127.0.0.1:5555")
	c, err := load(t, "port: 7000\nrbac:\n  auth_function_id: gate::auth\n  expose_functions: [match(\"api::*\")]\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != DefaultHost || c.Port != 7000 || c.EngineURL != "ws://127.0.0.1:5555" || c.RBAC.AuthFunctionID != "gate::auth" || len(c.RBAC.Expose) != 1 {
		t.Errorf("config %+v", c)
	}
	if c, err = load(t, "rbac:\n  expose_functions: [{metadata: {public: true}}]\n"); err != nil || len(c.RBAC.Expose) != 1 || c.RBAC.Expose[0].Metadata == nil {
		t.Errorf("a metadata filter: %+v %v", c.RBAC, err)
	}
	if c, err = load(t, "port: 7000\n"); err != nil || c.RBAC.Config == nil || c.authID() != "" {
		t.Errorf("no rbac block: %+v %v", c, err)
	}
	for yaml, want := range map[string]string{
		"porte: 1\n":                  "field porte not found",
		"rbac:\n  auth_function: x\n": `unknown key "auth_function" in rbac-proxy rbac`,
		"engine_url: http://x\n":      "engine_url",
		"port: 70000\n":               "out of range",
	} {
		_, err := load(t, yaml)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", yaml, err, want)
		}
		if err != nil && !strings.Contains(yaml, "porte") && errcode.As(err, "").Code != errcode.ConfigInvalid {
			t.Errorf("%q: code %s", yaml, errcode.As(err, "").Code)
		}
	}
}
