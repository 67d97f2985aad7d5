package configworker

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iii-go/iii/engine/core"
)

func TestExpandCoercesLonePlaceholders(t *testing.T) {
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"port":  map[string]any{"type": "integer"},
		"ratio": map[string]any{"type": "number"},
		"on":    map[string]any{"type": "boolean"},
		"url":   map[string]any{"type": "string"},
		"list":  map[string]any{"type": "array", "items": map[string]any{"type": "integer"}},
	}}
	in := map[string]any{"port": "${PORT:3111}", "ratio": "${R}", "on": "${ON:true}", "url": "http://${HOST:localhost}:${PORT:1}",
		"list": []any{"${PORT:1}", 2}, "other": "${MISSING}"}
	x := newExpander(func(k string) (string, bool) {
		v, ok := map[string]string{"R": "0.5", "PORT": "8080"}[k]
		return v, ok
	})
	got := x.value(in, schema)
	want := map[string]any{"port": int64(8080), "ratio": 0.5, "on": true, "url": "http://localhost:8080",
		"list": []any{int64(8080), 2}, "other": "${MISSING}"}
	if d := cmp.Diff(want, got); d != "" {
		t.Error(d)
	}
	if d := cmp.Diff([]string{"MISSING"}, x.missingVars()); d != "" {
		t.Error(d)
	}
}

func TestStorePersistsAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	w, err := New(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.register(context.Background(), callerNone, json.RawMessage(`{"id":"x","name":"X","schema":{"type":"object"},"initial_value":{"a":[1,"b"]}}`)); err != nil {
		t.Fatal(err)
	}
	w2, err := New(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := w2.get(context.Background(), callerNone, json.RawMessage(`{"id":"x","raw":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	if d := cmp.Diff(`{"id":"x","value":{"a":[1,"b"]}}`, string(b)); d != "" {
		t.Error(d)
	}
	if _, err := w2.set(context.Background(), callerNone, json.RawMessage(`{"id":"x","value":{}}`)); err == nil {
		t.Error("set before the owner registered again must fail (SCHEMA_UNAVAILABLE)")
	}
}

var callerNone = core.Caller{}
