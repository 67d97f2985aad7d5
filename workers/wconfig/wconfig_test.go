package wconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type cfg struct {
	Port int    `yaml:"port"`
	Host string `yaml:"host"`
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	t.Setenv("WCONFIG_PORT", "4000")
	_ = os.WriteFile(p, []byte("port: ${WCONFIG_PORT}\nhost: ${WCONFIG_UNSET:127.0.0.1}\n"), 0o600)
	c := cfg{Port: 1}
	if _, err := Load(p, &c, os.LookupEnv); err != nil || c.Port != 4000 || c.Host != "127.0.0.1" {
		t.Fatalf("%+v %v", c, err)
	}
	_ = os.WriteFile(p, []byte("prot: 1\n"), 0o600)
	if _, err := Load(p, &c, os.LookupEnv); err == nil || !strings.Contains(err.Error(), "prot") {
		t.Errorf("unknown key: %v", err)
	}
	_ = os.WriteFile(p, []byte("port: ${WCONFIG_NOPE}\n"), 0o600)
	if _, err := Load(p, &c, os.LookupEnv); err == nil || !strings.Contains(err.Error(), "WCONFIG_NOPE") {
		t.Errorf("unset variable: %v", err)
	}
}

// TestLoadKeepsTheShape: a variable's value is one scalar (text substitution made WCONFIG_HOST
// a second, unknown key), and a placeholder works inside a flow mapping.
func TestLoadKeepsTheShape(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	t.Setenv("WCONFIG_HOST", "h\nprot: 1 # x")
	_ = os.WriteFile(p, []byte("{port: ${WCONFIG_P:4001}, host: ${WCONFIG_HOST}}\n"), 0o600)
	var c cfg
	if _, err := Load(p, &c, os.LookupEnv); err != nil || c.Port != 4001 || c.Host != "h\nprot: 1 # x" {
		t.Fatalf("%+v %v", c, err)
	}
}
