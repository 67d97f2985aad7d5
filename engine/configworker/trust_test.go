package configworker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

var callerOwner = core.Caller{Owner: true}

func envWorker(t *testing.T, dir string) *Worker {
	t.Helper()
	env := map[string]string{"FAKE_CLOUD_KEY": "AKIA-secret-123"}
	w, err := New(dir, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func call(t *testing.T, fn Builtin, c core.Caller, body string) (string, error) {
	t.Helper()
	out, err := fn(context.Background(), c, json.RawMessage(body))
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(out)
	return string(b), nil
}

// Builtin is the shape of the worker's functions.
type Builtin = func(context.Context, core.Caller, json.RawMessage) (any, error)

func mustCall(t *testing.T, fn Builtin, c core.Caller, body string) string {
	t.Helper()
	out, err := call(t, fn, c, body)
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return out
}

// A caller without the owner credential or a namespace token never reads the engine's
// environment through an entry: neither its own (registered or set with a placeholder) nor the
// owner's; and what it wrote is never expanded for the owner either, so it cannot make a trusted
// reader use a value built from the environment.
func TestPlaceholdersNeedTrust(t *testing.T) {
	w := envWorker(t, t.TempDir())
	mustCall(t, w.register, callerNone, `{"id":"leak","name":"x","description":"","schema":null,"initial_value":{"k":"${FAKE_CLOUD_KEY}"}}`)
	for _, c := range []core.Caller{callerNone, callerOwner} {
		out := mustCall(t, w.get, c, `{"id":"leak"}`)
		if strings.Contains(out, "AKIA") || !strings.Contains(out, `"k":"${FAKE_CLOUD_KEY}"`) || !strings.Contains(out, `"unexpanded"`) {
			t.Errorf("untrusted entry read by owner=%v: %s", c.Owner, out)
		}
	}

	mustCall(t, w.register, callerOwner, `{"id":"mine","name":"x","schema":null,"initial_value":{"k":"${FAKE_CLOUD_KEY}"}}`)
	if out := mustCall(t, w.get, callerOwner, `{"id":"mine"}`); out != `{"id":"mine","value":{"k":"AKIA-secret-123"}}` {
		t.Errorf("owner reads its own entry: %s", out)
	}
	if out := mustCall(t, w.get, callerNone, `{"id":"mine"}`); strings.Contains(out, "AKIA") || !strings.Contains(out, "unexpanded") {
		t.Errorf("untrusted reads the owner's entry: %s", out)
	}

	// A set by an untrusted caller makes the value untrusted, for the owner too.
	mustCall(t, w.set, callerNone, `{"id":"mine","value":{"k":"https://evil.example/${FAKE_CLOUD_KEY}"}}`)
	if out := mustCall(t, w.get, callerOwner, `{"id":"mine"}`); strings.Contains(out, "AKIA") {
		t.Errorf("owner reads a value an untrusted caller set: %s", out)
	}
	mustCall(t, w.set, callerOwner, `{"id":"mine","value":{"k":"${FAKE_CLOUD_KEY}"}}`)
	if out := mustCall(t, w.get, callerOwner, `{"id":"mine"}`); !strings.Contains(out, "AKIA") {
		t.Errorf("owner's own set again: %s", out)
	}

	// The schema is no oracle: an untrusted caller's value is validated as a template, never
	// expanded, so a schema cannot tell whether a variable matches.
	if _, err := call(t, w.register, callerNone, `{"id":"probe","name":"x","schema":{"type":"object","properties":{"k":{"type":"string","pattern":"^AKIA"}}},"initial_value":{"k":"${FAKE_CLOUD_KEY}"}}`); err != nil {
		t.Errorf("probe accepted as a template whatever the variable holds: %v", err)
	}
	if _, err := call(t, w.register, callerNone, `{"id":"probe2","name":"x","schema":{"type":"object","properties":{"k":{"type":"string","pattern":"^ZZZ"}}},"initial_value":{"k":"${FAKE_CLOUD_KEY}"}}`); err != nil {
		t.Errorf("probe accepted as a template whatever the variable holds: %v", err)
	}

	// Provenance survives a restart.
	w2 := envWorker(t, w.store.dir)
	if out := mustCall(t, w2.get, callerOwner, `{"id":"leak"}`); strings.Contains(out, "AKIA") {
		t.Errorf("after a restart: %s", out)
	}
	if out := mustCall(t, w2.get, callerOwner, `{"id":"mine"}`); !strings.Contains(out, "AKIA") {
		t.Errorf("owner's entry after a restart: %s", out)
	}
}

// The entry the engine reads for itself is the owner's alone: anyone else's register or set is
// FORBIDDEN, and Own ignores (FORBIDDEN) a stored value marked untrusted while it expands the
// user's own file.
func TestEngineEntryIsTheOwners(t *testing.T) {
	dir := t.TempDir()
	w := envWorker(t, dir)
	for _, fn := range []Builtin{w.register, w.set} {
		_, err := call(t, fn, callerNone, `{"id":"iii-observability","name":"x","schema":null,"initial_value":{"sampling":{"default":1}},"value":{"exporter":"otlp"}}`)
		if pe, ok := err.(*protocol.Error); !ok || pe.Code != errcode.Forbidden || !strings.Contains(pe.Message, "iii-observability") {
			t.Errorf("untrusted write: %v", err)
		}
	}
	if v, err := w.Own("iii-observability"); v != nil || err != nil {
		t.Errorf("nothing stored: %s %v", v, err)
	}
	mustCall(t, w.register, callerOwner, `{"id":"iii-observability","name":"x","schema":null,"initial_value":{"endpoint":"${FAKE_CLOUD_KEY}"}}`)
	if v, err := w.Own("iii-observability"); err != nil || string(v) != `{"endpoint":"AKIA-secret-123"}` {
		t.Errorf("owner's entry: %s %v", v, err)
	}

	if err := os.WriteFile(filepath.Join(dir, "iii-observability.json"), []byte(`{"id":"iii-observability","value":{"sampling":{"default":1}},"untrusted":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	w2 := envWorker(t, dir)
	_, err := w2.Own("iii-observability")
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != errcode.Forbidden {
		t.Errorf("untrusted stored entry: %v", err)
	}
}
