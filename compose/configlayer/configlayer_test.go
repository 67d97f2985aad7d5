package configlayer

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func parse(t *testing.T, s string) any {
	t.Helper()
	if s == "" {
		return nil
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLayers(t *testing.T) {
	defaults := `{"auto_install":true,"image_allowlist":[],"custom_images":{},"default_memory_mb":512}`
	cases := []struct {
		name, current, override, want string
	}{
		{"defaults only", "", "", defaults},
		{"override replaces list and scalar",
			"", `{"image_allowlist":["python"],"default_memory_mb":1024}`,
			`{"auto_install":true,"image_allowlist":["python"],"custom_images":{},"default_memory_mb":1024}`},
		{"maps merge key by key",
			`{"custom_images":{"a":"r/a"}}`, `{"custom_images":{"b":"r/b"}}`,
			`{"auto_install":true,"image_allowlist":[],"custom_images":{"a":"r/a","b":"r/b"},"default_memory_mb":512}`},
		{"removed override key keeps its current value (D3)",
			`{"default_memory_mb":1024,"image_allowlist":["node"]}`, `{}`,
			`{"auto_install":true,"image_allowlist":["node"],"custom_images":{},"default_memory_mb":1024}`},
		{"current list is replaced, not appended",
			`{"image_allowlist":["node","python"]}`, `{"image_allowlist":["python"]}`,
			`{"auto_install":true,"image_allowlist":["python"],"custom_images":{},"default_memory_mb":512}`},
		{"null is a value",
			"", `{"default_memory_mb":null}`,
			`{"auto_install":true,"image_allowlist":[],"custom_images":{},"default_memory_mb":null}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Layers(parse(t, defaults), parse(t, c.current), parse(t, c.override))
			if d := cmp.Diff(parse(t, c.want), got); d != "" {
				t.Fatalf("(-want +got)\n%s", d)
			}
		})
	}
}

func TestVariantNameChangeReplaces(t *testing.T) {
	base := parse(t, `{"adapter":{"name":"kv","config":{"a":1}}}`)
	got := Merge(base, parse(t, `{"adapter":{"name":"redis","config":{"url":"x"}}}`))
	want := parse(t, `{"adapter":{"name":"redis","config":{"url":"x"}}}`)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got)\n%s", d)
	}
	got = Merge(base, parse(t, `{"adapter":{"name":"kv","config":{"b":2}}}`))
	want = parse(t, `{"adapter":{"name":"kv","config":{"a":1,"b":2}}}`)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("same name should merge (-want +got)\n%s", d)
	}
}

func TestMergeDoesNotAlias(t *testing.T) {
	base := parse(t, `{"m":{"a":[1]}}`)
	out := Merge(base, parse(t, `{}`)).(map[string]any)
	out["m"].(map[string]any)["a"].([]any)[0] = 9.0
	if d := cmp.Diff(parse(t, `{"m":{"a":[1]}}`), base); d != "" {
		t.Fatalf("base changed (-want +got)\n%s", d)
	}
}

func TestNormalizeYAMLKeys(t *testing.T) {
	v, err := Normalize(map[string]any{"a": map[any]any{"b": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(parse(t, `{"a":{"b":1}}`), v); d != "" {
		t.Fatal(d)
	}
	if _, err := Normalize(map[any]any{1: 2}); err == nil {
		t.Fatal("non-string key accepted")
	}
}
