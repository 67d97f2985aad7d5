package project

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/compose/composefile"
)

const adapterAndVM = `containers:
  sandbox-libkrun:
    worker: package://sandbox-libkrun
    version: '^0.3'
  api:
    worker: path://.
    scripts: { run: "${W}" }
`

// With the engine gone, the VM state cannot be deleted: the warning says so (req J5), without
// starting the adapter for the call or waiting out a call timeout per container.
func TestCleanupVMsWarnsWhenTheEngineHadStopped(t *testing.T) {
	p, eng, out := setup(t, adapterAndVM)
	eng.mu.Lock()
	eng.gone = true
	eng.mu.Unlock()
	start := time.Now()
	ws := p.cleanupVMs(context.Background(), p.File(), []string{"api"})
	if d := time.Since(start); d > 3*engineProbe {
		t.Fatalf("cleanupVMs took %v with the engine gone", d)
	}
	id := p.VMID("api")
	want := "warning: could not delete the VM state of container 'api' through adapter 'sandbox-libkrun' (the engine had already stopped); " +
		"vm_id " + id + ": its state stays in " + filepath.Join(p.opts.Home, ".iii", "sandbox", "workers", id) + ", delete it by hand"
	if len(ws) != 1 || ws[0] != want {
		t.Fatalf("warnings %q, want %q", ws, want)
	}
	if !strings.Contains(out.String(), want) {
		t.Fatalf("output does not carry the warning:\n%s", out)
	}
	if p.opts.Sup.Running("sandbox-libkrun") {
		t.Fatal("the adapter was started with the engine gone")
	}
	for _, c := range eng.calls {
		if strings.HasSuffix(c, "::worker::delete") {
			t.Fatalf("%s was called with the engine gone", c)
		}
	}
}

// Only a path:// VM worker whose directory contains the compose file (the compose directory itself
// or an ancestor of it) can read the token; one below it or beside it cannot (req B10).
func TestExposingWorkers(t *testing.T) {
	root := t.TempDir()
	for dir, manifest := range map[string]string{
		".":          "runtime: {base_image: python}\n",
		"sub":        "runtime: {base_image: python}\n",
		"../outside": "scripts: {start: ./run}\n",
		"..":         "runtime: {base_image: python}\n",
		"../vmside":  "runtime: {base_image: python}\n",
	} {
		p := filepath.Join(root, "proj", dir)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "iii.worker.yaml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(root, "proj", "worker-compose.yaml")
	f, err := composefile.Parse(path, []byte(`containers:
  whole: {worker: path://., scripts: {run: ./x}}
  sub: {worker: path://./sub, scripts: {run: ./x}}
  host: {worker: path://../outside, scripts: {run: ./x}}
  parent: {worker: path://.., scripts: {run: ./x}}
  beside: {worker: path://../vmside, scripts: {run: ./x}}
  adapter: {worker: package://sandbox-libkrun, version: '^0.3'}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ExposingWorkers(f), ","); got != "whole,parent" {
		t.Fatalf("ExposingWorkers = %q, want whole,parent", got)
	}
}

// A VM worker's environment values stay out of the worker::start request every observer
// receives: only the reserved III_* names (URLs, names and paths Compose sets) are inline; the
// container's environment (and the host baseline) goes into a 0600 file beside the project
// token, named by env_file.
func TestVMEnvKeepsValuesOutOfTheRequest(t *testing.T) {
	dir := t.TempDir()
	p := &Project{opts: Options{TokenFile: filepath.Join(dir, "token")}}
	payload := map[string]any{}
	file, err := p.vmEnv(payload, "vm-1", []string{"PATH=/usr/bin", "API_KEY=sk-secret", "III_URL=ws://127.0.0.1:1", "III_TOKEN_FILE=" + filepath.Join(dir, "token")})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, VMEnvDir, "vm-1.json"); file != want || payload["env_file"] != want {
		t.Fatalf("env file %s, payload %v", file, payload)
	}
	b, _ := json.Marshal(payload)
	if strings.Contains(string(b), "sk-secret") || strings.Contains(string(b), "/usr/bin") {
		t.Fatalf("the request carries environment values: %s", b)
	}
	if env := payload["env"].(map[string]string); len(env) != 2 || env["III_URL"] != "ws://127.0.0.1:1" || env["III_TOKEN_FILE"] == "" {
		t.Fatalf("inline env %v", env)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("env file %v %v", st, err)
	}
	data, _ := os.ReadFile(file)
	var private map[string]string
	if err := json.Unmarshal(data, &private); err != nil || private["API_KEY"] != "sk-secret" || private["PATH"] != "/usr/bin" || len(private) != 2 {
		t.Fatalf("env file %s: %v", data, err)
	}
}

// TestSummary: the line iii's start script waits for.
func TestSummary(t *testing.T) {
	re := regexp.MustCompile(`^up: (nothing to do|[0-9]+ of [0-9]+ changed)`)
	for _, c := range []struct {
		changed, total int
		took           time.Duration
		want           string
	}{
		{2, 5, 340 * time.Millisecond, "up: 2 of 5 changed in 340ms"},
		{0, 5, 12 * time.Millisecond, "up: nothing to do (5 already in place) in 12ms"},
		{5, 5, 2345 * time.Millisecond, "up: 5 of 5 changed in 2.3s"},
	} {
		got := Summary("up", c.changed, c.total, c.took)
		if got != c.want || !re.MatchString(got) {
			t.Errorf("Summary(%d, %d, %v) = %q, want %q", c.changed, c.total, c.took, got, c.want)
		}
	}
}
