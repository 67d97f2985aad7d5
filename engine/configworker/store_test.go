package configworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

func mustNew(t *testing.T, dir string, log *slog.Logger) *Worker {
	t.Helper()
	w, err := New(dir, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func rawGet(t *testing.T, w *Worker, id string) string {
	t.Helper()
	out, err := w.get(context.Background(), callerNone, json.RawMessage(`{"id":"`+id+`","raw":true}`))
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return string(out.(map[string]any)["value"].(json.RawMessage))
}

// TestValuesReadBackExactly: what register stored comes back unchanged after a restart: no YAML
// merge keys, no number rounding.
func TestValuesReadBackExactly(t *testing.T) {
	dir := t.TempDir()
	w := mustNew(t, dir, nil)
	values := map[string]string{
		"merge5":   `{"<<":5}`,
		"mergemap": `{"<<":{"a":1},"b":2}`,
		"numbers":  `{"big":12345678901234567890,"f":1.50,"e":1e300,"neg":-0}`,
		"strings":  `["yes","no","0x10","~","null","2001-12-14","${VAR:x}"]`,
		"scalar":   `"just a string"`,
		"html":     `{"a":"<b>&amp;"}`,
	}
	for id, v := range values {
		if _, err := w.register(context.Background(), callerNone, json.RawMessage(`{"id":"`+id+`","schema":null,"initial_value":`+v+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	w2 := mustNew(t, dir, nil)
	for id, v := range values {
		if got := rawGet(t, w2, id); got != v {
			t.Errorf("%s: got %s, want %s", id, got, v)
		}
	}
}

// TestBadEntriesAreSkipped: an entry that cannot be read is logged and skipped; the others load
// and the engine starts.
func TestBadEntriesAreSkipped(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"good.json":     `{"id":"good","value":{"a":1}}`,
		"broken.json":   `{"id":`,
		"broken2.yaml":  "value: [\n",
		"dup.yaml":      "value:\n  a: 1\n  a: 2\n",
		"alias.yaml":    "value:\n  a: &x [1]\n  b: *x\n",
		"Bad-ID.json":   `{"value":1}`,
		"legacy.yaml":   "id: legacy\nvalue:\n  <<: 5\n",
		"notmap.yaml":   "- 1\n",
		"deep.yaml":     "value: " + strings.Repeat("[", 1200) + strings.Repeat("]", 1200) + "\n",
		"toolarge.json": `{"id":"toolarge","value":"` + strings.Repeat("x", MaxValueBytes+maxEnvelope) + `"}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	w := mustNew(t, dir, slog.New(slog.NewTextHandler(&logs, nil)))
	if got := rawGet(t, w, "good"); got != `{"a":1}` {
		t.Errorf("good: %s", got)
	}
	if got := rawGet(t, w, "legacy"); got != `{"<<":5}` {
		t.Errorf("legacy: %s", got)
	}
	for _, f := range []string{"broken.json", "broken2.yaml", "dup.yaml", "alias.yaml", "Bad-ID.json", "notmap.yaml", "deep.yaml", "toolarge.json"} {
		if !strings.Contains(logs.String(), f) {
			t.Errorf("no log line about %s:\n%s", f, logs.String())
		}
	}
	if len(w.stored) != 2 {
		t.Errorf("stored %d entries, want 2", len(w.stored))
	}
}

// TestLegacyYAMLEntries: entries written as YAML by older versions read back as the JSON they
// were made from, and the next write replaces the .yaml file with a .json one.
func TestLegacyYAMLEntries(t *testing.T) {
	dir := t.TempDir()
	value := map[string]any{"s": "text", "n": 42, "neg": -7, "f": 2.5, "t": true, "nil": nil, "list": []any{1, "two", []any{}},
		"nested": map[string]any{"yes": "yes", "num": "123", "empty": map[string]any{}}, "big": uint64(18446744073709551615)}
	old := struct {
		ID    string `yaml:"id"`
		Name  string `yaml:"name,omitempty"`
		Value any    `yaml:"value"`
	}{"old", "Old", value}
	b, err := yaml.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	w := mustNew(t, dir, nil)
	var got, want any
	if err := json.Unmarshal([]byte(rawGet(t, w, "old")), &got); err != nil {
		t.Fatal(err)
	}
	jb, _ := json.Marshal(value)
	_ = json.Unmarshal(jb, &want)
	if d := cmp.Diff(want, got); d != "" {
		t.Error(d)
	}
	if _, err := w.register(context.Background(), callerNone, json.RawMessage(`{"id":"old","schema":null,"initial_value":{"x":1}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "old.yaml")); !os.IsNotExist(err) {
		t.Errorf("old.yaml still there: %v", err)
	}
	if got := rawGet(t, mustNew(t, dir, nil), "old"); got != `{"x":1}` {
		t.Errorf("after the rewrite: %s", got)
	}
}

// TestLoadManyKeys loads entries of 100 000 keys, stored as JSON and as legacy YAML, and logs
// how long the load took (the YAML form once took 30.7 s).
func TestLoadManyKeys(t *testing.T) {
	dir := t.TempDir()
	const n = 100000
	var js, ys strings.Builder
	js.WriteString(`{"id":"many","value":{`)
	ys.WriteString("id: manyyaml\nvalue:\n")
	for i := range n {
		if i > 0 {
			js.WriteByte(',')
		}
		fmt.Fprintf(&js, `"key%06d":%d`, i, i)
		fmt.Fprintf(&ys, "  key%06d: %d\n", i, i)
	}
	js.WriteString("}}")
	_ = os.WriteFile(filepath.Join(dir, "many.json"), []byte(js.String()), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "manyyaml.yaml"), []byte(ys.String()), 0o644)
	start := time.Now()
	w := mustNew(t, dir, nil)
	t.Logf("loaded two entries of %d keys (%d and %d bytes) in %v", n, js.Len(), ys.Len(), time.Since(start).Round(time.Millisecond))
	for _, id := range []string{"many", "manyyaml"} {
		var m map[string]int
		if err := json.Unmarshal([]byte(rawGet(t, w, id)), &m); err != nil || len(m) != n || m["key099999"] != 99999 {
			t.Errorf("%s: %d keys, %v", id, len(m), err)
		}
	}
}

// TestEntrySizeCap: register, set and publish refuse a value over MaxValueBytes.
func TestEntrySizeCap(t *testing.T) {
	w := mustNew(t, t.TempDir(), nil)
	big := `"` + strings.Repeat("x", MaxValueBytes) + `"`
	calls := []struct {
		fn   func(context.Context, core.Caller, json.RawMessage) (any, error)
		body string
	}{
		{w.register, `{"id":"big","schema":null,"initial_value":` + big + `}`},
		{w.publish, `{"id":"big","value":` + big + `}`},
	}
	if _, err := w.register(context.Background(), callerNone, json.RawMessage(`{"id":"big","schema":null}`)); err != nil {
		t.Fatal(err)
	}
	calls = append(calls, struct {
		fn   func(context.Context, core.Caller, json.RawMessage) (any, error)
		body string
	}{w.set, `{"id":"big","value":` + big + `}`})
	for i, c := range calls {
		_, err := c.fn(context.Background(), core.Caller{Owner: true}, json.RawMessage(c.body))
		if pe, ok := err.(*protocol.Error); !ok || pe.Code != errcode.EntryTooLarge {
			t.Errorf("call %d: got %v, want %s", i, err, errcode.EntryTooLarge)
		}
	}
}

// FuzzLegacyEntry: the YAML entry reader never panics, and what it accepts is valid JSON.
func FuzzLegacyEntry(f *testing.F) {
	for _, s := range []string{"id: a\nvalue: {x: [1, 2.5, true, null, 'q']}\n", "value:\n  <<: 5\n", "value: &a [*a]\n",
		"value: !!binary aGk=\n", "value: 0x1F\n", "value: .inf\n", "value: {? [1]: 2}\n", "value: 2001-12-14\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := legacyEntry(b)
		if err == nil && !json.Valid(e.Value) {
			t.Fatalf("invalid JSON %q from %q", e.Value, b)
		}
	})
}

// TestGetPublishedOnly: published_only reads only what the owner published, never an entry
// anyone registered under the same id.
func TestGetPublishedOnly(t *testing.T) {
	w := mustNew(t, t.TempDir(), nil)
	ctx := context.Background()
	if _, err := w.register(ctx, callerNone, json.RawMessage(`{"id":"default-sandbox-libkrun","schema":null,"initial_value":{"custom_images":{"evil":"docker.io/attacker/evil"}}}`)); err != nil {
		t.Fatal(err)
	}
	_, err := w.get(ctx, callerNone, json.RawMessage(`{"id":"default-sandbox-libkrun","published_only":true}`))
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != errcode.NotFound {
		t.Fatalf("registered, not published: %v", err)
	}
	if _, err := w.publish(ctx, core.Caller{Owner: true}, json.RawMessage(`{"id":"default-sandbox-libkrun","value":{"auto_install":false}}`)); err != nil {
		t.Fatal(err)
	}
	out, err := w.get(ctx, callerNone, json.RawMessage(`{"id":"default-sandbox-libkrun","published_only":true,"raw":true}`))
	if err != nil || string(out.(map[string]any)["value"].(json.RawMessage)) != `{"auto_install":false}` {
		t.Fatalf("published: %v %v", out, err)
	}
}
