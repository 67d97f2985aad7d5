package protocol

import "testing"

// A Config is used as it is: the process's own variables never fill it. FromEnv fills the empty
// fields from the variables it is handed, as iii's SDKs read them, and takes $III_TOKEN only
// when there is no token file.
func TestConfigFromEnv(t *testing.T) {
	t.Setenv(EnvURL, "ws://from-process:1")
	t.Setenv(EnvTokenFile, "/from-process")
	if c := (Config{}).withDefaults(); c.URL != DefaultURL || c.Namespace != DefaultNamespace || c.Name != "" || c.TokenFile != "" || c.Token != "" {
		t.Fatalf("zero Config = %+v, want the defaults and no variables", c)
	}
	vars := map[string]string{EnvURL: "ws://e:2", EnvNamespace: "ns", EnvWorkerName: "w", EnvTokenFile: "/tok", EnvToken: "secret"}
	getenv := func(k string) string { return vars[k] }
	c := Config{Name: "mine"}.FromEnv(getenv)
	if c.URL != "ws://e:2" || c.Namespace != "ns" || c.Name != "mine" || c.TokenFile != "/tok" || c.Token != "" {
		t.Fatalf("FromEnv = %+v", c)
	}
	delete(vars, EnvTokenFile)
	if c := (Config{}).FromEnv(getenv); c.Token != "secret" || c.TokenFile != "" {
		t.Fatalf("without a token file: %+v", c)
	}
	if c := (Config{Token: "given"}).FromEnv(getenv); c.Token != "given" {
		t.Fatalf("a given token was replaced: %+v", c)
	}
	if c := (Config{}).FromEnv(nil); c != (Config{}) {
		t.Fatalf("FromEnv(nil) = %+v, want no change", c)
	}
}
