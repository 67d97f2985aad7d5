package composefile

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/compose/errcode"
)

// manyKeys renders n config_override keys (k0: 0, k1: 1, ...) under container a, plus env
// entries when env is set.
func manyKeys(n int, section string) []byte {
	var b strings.Builder
	b.WriteString("containers:\n  a:\n    worker: path://.\n    " + section + ":\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "      k%d: %d\n", i, i)
	}
	return []byte(b.String())
}

// TestManyKeysParse: 100 000 keys under config_override, environment and at the top level parse
// (or are refused) without the quadratic duplicate-key check of yaml.v3's Decode.
// No timing assertion: the time is logged for the record.
func TestManyKeysParse(t *testing.T) {
	const n = 100000
	for _, section := range []string{"config_override", "environment"} {
		start := time.Now()
		f, err := Parse("/proj/worker-compose.yaml", manyKeys(n, section), env(nil))
		if err != nil {
			t.Fatalf("%s with %d keys: %v", section, n, err)
		}
		t.Logf("%s: %d keys parsed in %v", section, n, time.Since(start))
		a := f.Containers["a"]
		switch section {
		case "config_override":
			if len(a.ConfigOverride) != n || a.ConfigOverride["k99999"] != 99999 {
				t.Fatalf("config_override holds %d keys, k99999 = %v", len(a.ConfigOverride), a.ConfigOverride["k99999"])
			}
		case "environment":
			if len(a.Environment) != n || a.Environment["k99999"] != "99999" {
				t.Fatalf("environment holds %d keys", len(a.Environment))
			}
		}
	}
	var b strings.Builder
	b.WriteString("containers: {a: {worker: path://.}}\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "k%d: %d\n", i, i)
	}
	start := time.Now()
	_, err := Parse("/proj/worker-compose.yaml", []byte(b.String()), env(nil))
	if e := errcode.As(err, ""); e.Code != errcode.InvalidComposeFile || !strings.Contains(e.Message, `unknown key "k0"`) {
		t.Fatalf("top level with %d keys: %v", n, err)
	}
	t.Logf("top level: %d keys refused in %v", n, time.Since(start))
}

// TestConfigOverrideDuplicateKey: the map-based check still refuses a repeated key, and names
// both lines.
func TestConfigOverrideDuplicateKey(t *testing.T) {
	for _, doc := range []string{
		"containers:\n  a:\n    worker: path://.\n    config_override:\n      x: 1\n      y: 2\n      x: 3\n",
		"containers:\n  a:\n    worker: path://.\n    config_override:\n      n:\n        x: 1\n        x: 3\n",
		"engine:\n  workers:\n    iii-stream:\n      x: 1\n      x: 3\n",
	} {
		_, err := Parse("/proj/worker-compose.yaml", []byte(doc), env(nil))
		if err == nil || !strings.Contains(err.Error(), `"x"`) || !strings.Contains(err.Error(), "line") || !strings.Contains(err.Error(), "/proj/worker-compose.yaml") {
			t.Fatalf("duplicate key accepted or unnamed: %v\n%s", err, doc)
		}
	}
}

// TestConfigOverrideValues: the node walk gives the values Decode gave: typed scalars, nested
// maps and lists, anchors, aliases and merge keys (explicit keys win, the first merged map wins).
func TestConfigOverrideValues(t *testing.T) {
	doc := `containers:
  a:
    worker: path://.
    config_override:
      s: text
      q: "1"
      i: 7
      big: 18446744073709551615
      f: 1.5
      b: true
      n: null
      e:
      ts: 2001-12-14
      list: [1, two, {three: 3}]
      nested: &base {x: 1, y: [a]}
      copy: *base
      merged:
        <<: [*base, {x: 9, z: 3}]
        y: mine
`
	f, err := Parse("/proj/worker-compose.yaml", []byte(doc), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := f.Containers["a"].ConfigOverride
	want := map[string]any{
		"s": "text", "q": "1", "i": 7, "big": uint64(18446744073709551615), "f": 1.5, "b": true, "n": nil, "e": nil,
		"ts":     got["ts"], // whatever yaml.v3 resolves a timestamp to, checked below
		"list":   []any{1, "two", map[string]any{"three": 3}},
		"nested": map[string]any{"x": 1, "y": []any{"a"}},
		"copy":   map[string]any{"x": 1, "y": []any{"a"}},
		"merged": map[string]any{"x": 1, "y": "mine", "z": 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("config_override:\n got %#v\nwant %#v", got, want)
	}
	if _, ok := got["ts"].(time.Time); !ok {
		t.Fatalf("ts = %#v, want the time.Time yaml.v3 gives", got["ts"])
	}
}

// TestConfigOverrideAliasBomb: anchors that expand exponentially are refused, quickly.
func TestConfigOverrideAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("containers:\n  a:\n    worker: path://.\n    config_override:\n      l0: &l0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	_, err := Parse("/proj/worker-compose.yaml", []byte(b.String()), env(nil))
	if e := errcode.As(err, ""); e.Code != errcode.InvalidComposeFile || !strings.Contains(e.Message, "aliasing") {
		t.Fatalf("alias bomb: %v", err)
	}
}

// TestComposeFileTooLarge: a file over MaxFileSize is refused with a coded error naming it, by
// Load (before reading it all) and by Parse.
func TestComposeFileTooLarge(t *testing.T) {
	data := []byte("# " + strings.Repeat("x", MaxFileSize) + "\nengine: {}\n")
	_, err := Parse("/proj/worker-compose.yaml", data, env(nil))
	if e := errcode.As(err, ""); e.Code != errcode.ComposeFileTooLarge || !strings.Contains(e.Message, "/proj/worker-compose.yaml") {
		t.Fatalf("Parse: %v", err)
	}
	path := t.TempDir() + "/worker-compose.yaml"
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, env(nil))
	if e := errcode.As(err, ""); e.Code != errcode.ComposeFileTooLarge || !strings.Contains(e.Message, path) {
		t.Fatalf("Load: %v", err)
	}
}

// BenchmarkConfigOverrideKeys reports the time per parse for 10 000 and 100 000 keys: linear
// parsing keeps the ratio near 10 (it was near 100 with Decode).
func BenchmarkConfigOverrideKeys(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		data := manyKeys(n, "config_override")
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Parse("/proj/worker-compose.yaml", data, env(nil)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
