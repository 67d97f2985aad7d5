package project

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/state"
	"github.com/iii-go/iii/compose/supervisor"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	engineerr "github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/procgroup"
)

// fakeEngine answers the engine functions the project uses. A worker counts as registered once
// its log holds the line READY (the test workers print it after reading their environment).
type fakeEngine struct {
	t     *testing.T
	dir   state.Dir
	sup   *supervisor.Supervisor
	ns    string
	mu    sync.Mutex
	store map[string]any
	calls []string
	// gone makes every call fail NOT_CONNECTED, as when Compose has lost its engine.
	gone bool
}

func (e *fakeEngine) Call(_ context.Context, fn string, payload any, _ ...protocol.CallOption) (json.RawMessage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, fn)
	if e.gone {
		return nil, protocol.NewError(engineerr.NotConnected, "not connected to the engine")
	}
	b, _ := json.Marshal(payload)
	var in map[string]any
	_ = json.Unmarshal(b, &in)
	switch fn {
	case protocol.FnListWorkers:
		var ws []map[string]any
		entries, _ := os.ReadDir(e.dir.Join(state.LogsDir))
		for _, en := range entries {
			key := strings.TrimSuffix(en.Name(), ".log")
			data, _ := os.ReadFile(e.dir.LogPath(key))
			if e.sup.Running(key) && bytes.Contains(data, []byte("READY")) {
				ws = append(ws, map[string]any{"name": key, "namespace": e.ns, "registered": true})
			}
		}
		return json.Marshal(map[string]any{"workers": ws})
	case FnConfigGet:
		v, ok := e.store[in["id"].(string)]
		if !ok {
			return nil, protocol.NewError("NOT_FOUND", "configuration '%s' not found", in["id"])
		}
		return json.Marshal(map[string]any{"id": in["id"], "value": v})
	case FnConfigPublish:
		e.store[in["id"].(string)] = in["value"]
		return json.RawMessage(`{}`), nil
	case protocol.FnListFunctions:
		return json.RawMessage(`{"functions":[]}`), nil
	}
	return nil, protocol.NewError("function_not_found", "%s", fn)
}

const worker = `echo "ns=$III_NAMESPACE name=$III_WORKER_NAME cfg=$III_CONFIG token=$III_TOKEN_FILE value=$III_TOKEN"; echo READY; while :; do sleep 0.05; done`

func setup(t *testing.T, yaml string) (*Project, *fakeEngine, *bytes.Buffer) {
	t.Helper()
	t.Setenv(state.EnvStateDir, "")
	dir := t.TempDir()
	path := filepath.Join(dir, "worker-compose.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := composefile.Load(path, func(k string) (string, bool) {
		if k == "W" {
			return worker, true
		}
		return os.LookupEnv(k)
	})
	if err != nil {
		t.Fatal(err)
	}
	sd, err := state.Resolve(path, f.Namespace, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := sd.Ensure(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sd.Join("token"), []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sup := supervisor.New(nil)
	eng := &fakeEngine{t: t, dir: sd, sup: sup, ns: f.Namespace, store: map[string]any{}}
	var out bytes.Buffer
	p := New(Options{LookupEnv: os.LookupEnv, File: f, State: sd, EngineURL: "ws://127.0.0.1:1", TokenFile: sd.Join("token"), Managed: true,
		Engine: eng, Sup: sup, Out: &syncBuffer{b: &out}, Poll: 20 * time.Millisecond})
	t.Cleanup(func() { p.StopAll(context.Background()) })
	return p, eng, &out
}

type syncBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

const threeWorkers = `namespace: shop
stop_timeout: 2s
containers:
  db:
    worker: path://.
    scripts: { run: "${W}" }
  api:
    worker: path://.
    start_after: [db]
    config_override: { port: 8080 }
    scripts: { run: "${W}" }
  web:
    worker: path://.
    start_after: [api]
    scripts: { run: "${W}" }
`

func TestUpInOrderWithReservedEnvAndConfig(t *testing.T) {
	p, eng, out := setup(t, threeWorkers)
	res, err := p.Up(context.Background(), "")
	if err != nil {
		t.Fatalf("Up: %v\n%s", err, out)
	}
	if res.Status != "ok" || len(res.Containers) != 3 {
		t.Fatalf("result %+v", res)
	}
	for i, want := range []string{"db", "api", "web"} {
		if res.Containers[i].Container != want || res.Containers[i].State != StateReady {
			t.Fatalf("container %d = %+v, want %s ready", i, res.Containers[i], want)
		}
	}
	log, _ := os.ReadFile(p.opts.State.LogPath("api"))
	if !strings.Contains(string(log), "ns=shop name=api cfg="+p.opts.State.ConfigPath("api")) || !strings.Contains(string(log), "token="+p.opts.State.Join("token")+" value=tok-123") {
		t.Fatalf("api environment: %s", log)
	}
	id := ConfigID(p.File(), "api")
	if v, ok := eng.store[id].(map[string]any); !ok || v["port"] != float64(8080) {
		t.Fatalf("published %s = %v", id, eng.store[id])
	}
	st, err := os.Stat(p.opts.State.ConfigPath("api"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v %v", st, err)
	}
	if strings.Index(out.String(), "api") > strings.Index(out.String(), "web") {
		t.Fatalf("progress out of order:\n%s", out)
	}
	rec, err := p.opts.State.Load()
	if err != nil || rec.Children["web"].PID == 0 || rec.Children["web"].Status != StateReady || rec.Children["web"].StartedAt.IsZero() {
		t.Fatalf("state.json children = %+v, %v", rec.Children, err)
	}
	if !strings.Contains(out.String(), "\nup: 3 of 3 changed in ") {
		t.Fatalf("no summary line:\n%s", out)
	}
	again, err := p.Up(context.Background(), "")
	if err != nil || again.Changed {
		t.Fatalf("second Up changed=%v err=%v", again.Changed, err)
	}
	if !strings.Contains(out.String(), "\nup: nothing to do (3 already in place) in ") {
		t.Fatalf("no summary line for the second up:\n%s", out)
	}
	if _, err := p.Down(context.Background(), ""); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if !strings.Contains(out.String(), "\ndown: 3 of 3 changed in ") {
		t.Fatalf("no summary line for down:\n%s", out)
	}
}

func TestKilledWorkerTakesDependentsDown(t *testing.T) {
	p, _, out := setup(t, threeWorkers)
	if _, err := p.Up(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	web := p.opts.Sup.Get("web").PID
	api, err := os.FindProcess(p.opts.Sup.Get("api").PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Kill(); err != nil {
		t.Fatal(err)
	}
	if !enginetest.Poll(5*time.Second, func() bool { return p.state("web") == StateStopped }) {
		t.Fatalf("web still %s\n%s", p.state("web"), out)
	}
	if procgroup.Alive(web) {
		<-p.opts.Sup.Get("web").Done()
	}
	if p.state("api") != StateFailed || p.state("db") != StateReady {
		t.Fatalf("states api=%s db=%s", p.state("api"), p.state("db"))
	}
	if !strings.Contains(out.String(), "container 'api'") || !strings.Contains(out.String(), "stopping its dependents: web") {
		t.Fatalf("no report:\n%s", out)
	}
}

// upFails sets up the project of yaml and runs Up, which must fail with an error naming every
// one of codes.
func upFails(t *testing.T, yaml string, codes ...string) (*Project, Result, *bytes.Buffer, error) {
	t.Helper()
	p, _, out := setup(t, yaml)
	res, err := p.Up(context.Background(), "")
	ok := err != nil
	for _, code := range codes {
		ok = ok && strings.Contains(err.Error(), code)
	}
	if !ok {
		t.Fatalf("Up error = %v", err)
	}
	return p, res, out, err
}

func TestFailedUpRollsBack(t *testing.T) {
	p, res, out, err := upFails(t, `stop_timeout: 1s
containers:
  db:
    worker: path://.
    scripts: { run: "${W}" }
  bad:
    worker: path://.
    start_after: [db]
    scripts: { run: "echo oops; exit 3" }
`, "PROJECT_DID_NOT_START", "CHILD_EXITED_BEFORE_REGISTRATION")
	if res.Status != "failed" || p.state("db") != StateStopped || p.opts.Sup.Running("db") {
		t.Fatalf("db not rolled back: %s\n%s", p.state("db"), out)
	}
	if !strings.Contains(err.Error(), "oops") {
		t.Fatalf("error lacks the log tail: %v", err)
	}
}

func TestStartupTimeout(t *testing.T) {
	upFails(t, `startup_timeout: 300ms
containers:
  slow:
    worker: path://.
    scripts: { run: "while :; do sleep 0.05; done" }
`, "STARTUP_TIMEOUT")
}

func TestAdapterConfigLayersAndRemovedKeyKeepsValue(t *testing.T) {
	p, eng, _ := setup(t, threeWorkers)
	f := p.File()
	f.Containers["api"].ConfigOverride = map[string]any{"custom_images": map[string]any{"a": "r/a"}, "image_allowlist": []any{"python"}}
	p.SetFile(f, map[string]Package{})
	if _, _, err := p.layeredConfig(context.Background(), f, "api"); err != nil {
		t.Fatal(err)
	}
	f.Containers["api"].ConfigOverride = map[string]any{"custom_images": map[string]any{"b": "r/b"}}
	if _, _, err := p.layeredConfig(context.Background(), f, "api"); err != nil {
		t.Fatal(err)
	}
	v := eng.store[ConfigID(f, "api")].(map[string]any)
	imgs := v["custom_images"].(map[string]any)
	if imgs["a"] != "r/a" || imgs["b"] != "r/b" || len(v["image_allowlist"].([]any)) != 1 {
		t.Fatalf("layered value %v", v)
	}
}

// A start cut short by Compose's context (a SIGINT or SIGTERM to Compose) fails
// OPERATION_CANCELLED naming the cause, not a bare "context canceled".
func TestInterruptedStartNamesTheCause(t *testing.T) {
	p, _, _ := setup(t, `containers:
  slow:
    worker: path://.
    scripts: { run: "while :; do sleep 0.05; done" }
`)
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(200*time.Millisecond, func() { cancel(errors.New("terminated signal received")) })
	_, err := p.Up(ctx, "")
	if err == nil || !strings.Contains(err.Error(), "OPERATION_CANCELLED") || !strings.Contains(err.Error(), "terminated signal received") {
		t.Fatalf("Up error = %v", err)
	}
}
