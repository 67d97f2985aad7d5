package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
)

func load(t *testing.T, yaml string) *composefile.File {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "worker-compose.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "api"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := composefile.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

const file = `containers:
  adapter:
    worker: package://sandbox-libkrun
    version: '^0.2'
  api:
    worker: path://./api
    scripts: { run: ./api }
`

func TestParseAdd(t *testing.T) {
	f := load(t, file)
	e, err := parseAdd(f, "iii-sandbox")
	if err != nil || e.key != "adapter" || e.worker != "package://api.workers.iii.dev/sandbox-libkrun" || e.version != "^0.3" {
		t.Fatalf("iii-sandbox = %+v, %v", e, err)
	}
	e, err = parseAdd(f, "state@0.22.2")
	if err != nil || e.key != "state" || e.worker != "package://state" || e.version != "0.22.2" {
		t.Fatalf("state@0.22.2 = %+v, %v", e, err)
	}
	e, err = parseAdd(f, "example.com/tools")
	if err != nil || e.key != "tools" || e.worker != "package://example.com/tools" || e.version != "latest" {
		t.Fatalf("host/name = %+v, %v", e, err)
	}
	e, err = parseAdd(f, filepath.Join(f.Dir, "..", "shared"))
	if err != nil || e.key != "shared" || e.worker != "path://../shared" {
		t.Fatalf("path = %+v, %v", e, err)
	}
	if _, err := parseAdd(f, "bad name"); errcode.CodeOf(err) != errcode.InvalidWorkerSpec {
		t.Fatalf("bad name: %v", err)
	}
}

func TestContainerFor(t *testing.T) {
	f := load(t, file)
	for in, want := range map[string]string{"iii-sandbox": "adapter", "sandbox-libkrun": "adapter", "api": "api", "nope": ""} {
		if got := containerFor(f, in); got != want {
			t.Errorf("containerFor(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRequestWorkers(t *testing.T) {
	var r Request
	if err := json.Unmarshal([]byte(`{"worker":["a","b"],"workers":["c"]}`), &r); err != nil {
		t.Fatal(err)
	}
	got := r.workers()
	if len(got) != 3 || got[0] != "c" || got[1] != "a" || got[2] != "b" {
		t.Fatalf("workers = %v", got)
	}
}

// Settle waits for the mutation in flight, and gives up after its limit on one that hangs.
func TestSettle(t *testing.T) {
	d := New("default", nil, Deps{})
	release := d.HoldMutations()
	done := make(chan struct{})
	go func() {
		d.Settle(10 * time.Second)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Settle returned while a mutation was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Settle did not return once the mutation finished")
	}

	stuck := New("default", nil, Deps{})
	stuck.HoldMutations()
	start := time.Now()
	stuck.Settle(100 * time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Settle waited %v for a stuck mutation", d)
	}
}

// A malformed compose::logs request (a cursor offset no integer holds, a string for a number)
// answers INVALID_REQUEST, the code of every bad compose::logs field; the other functions keep
// INVALID_WORKER_SPEC.
func TestDecodeRequestCodes(t *testing.T) {
	for _, c := range []struct{ fn, body, code string }{
		{FnLogs, `{"cursors":{"api":{"generation":0,"offset":1e300}}}`, errcode.InvalidRequest},
		{FnLogs, `{"cursors":{"api":{"generation":0,"offset":"x"}}}`, errcode.InvalidRequest},
		{FnLogs, `{"tail":"x"}`, errcode.InvalidRequest},
		{FnLogs, `{"bogus":1}`, errcode.InvalidRequest},
		{FnAdd, `{"bogus":1}`, errcode.InvalidWorkerSpec},
	} {
		_, err := decodeRequest(c.fn, json.RawMessage(c.body))
		if got := errcode.CodeOf(err); got != c.code {
			t.Errorf("%s %s: code %q (%v), want %s", c.fn, c.body, got, err, c.code)
		}
	}
	if _, err := decodeRequest(FnLogs, json.RawMessage(`{"cursors":{"api":{"generation":1,"offset":2}},"tail":3}`)); err != nil {
		t.Fatalf("a good request: %v", err)
	}
}

// TestWorkerObjectsRefused: worker= is a string or a list of strings; anything else is
// INVALID_WORKER_SPEC naming the entry, never dropped.
func TestWorkerObjectsRefused(t *testing.T) {
	for _, c := range []struct{ body, names string }{
		{`{"worker":{"name":"state","version":"0.22.2"}}`, `worker is {"name":"state","version":"0.22.2"}`},
		{`{"worker":["a",{"name":"state"}]}`, `worker[1] is {"name":"state"}`},
		{`{"worker":7}`, `worker is 7`},
	} {
		_, err := decodeRequest(FnAdd, json.RawMessage(c.body))
		if errcode.CodeOf(err) != errcode.InvalidWorkerSpec || !strings.Contains(err.Error(), c.names) {
			t.Errorf("%s: %v; want INVALID_WORKER_SPEC naming %q", c.body, err, c.names)
		}
	}
	for _, body := range []string{`{"worker":"state@0.22.2"}`, `{"worker":["a","b"]}`, `{}`} {
		if _, err := decodeRequest(FnAdd, json.RawMessage(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}
