package jsstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/internal/base/errcode"
)

var stateRule = AdapterRule{Worker: "state", Store: []string{"kv"}, Refused: []string{"redis", "bridge"}}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestResolveMapsIIIAdapters: iii's kv blocks become a placement; a relative file_path is
// resolved in the Compose file's directory.
func TestResolveMapsIIIAdapters(t *testing.T) {
	p, err := stateRule.Resolve(&Adapter{Name: "kv", Config: map[string]any{"store_method": "file_based", "file_path": "./data/state_store.db", "save_interval_ms": 5000}},
		Config{}, env(map[string]string{EnvComposeDir: "/proj"}))
	if err != nil || p.Memory || p.Dir != "/proj/data/state_store.db" {
		t.Fatalf("file_based: %+v %v", p, err)
	}
	wd, _ := os.Getwd()
	if p, err = stateRule.Resolve(&Adapter{Name: "kv", Config: map[string]any{"file_path": "d"}}, Config{}, env(nil)); err != nil || p.Dir != filepath.Join(wd, "d") {
		t.Fatalf("relative to the working directory: %+v %v", p, err)
	}
	if p, err = stateRule.Resolve(&Adapter{Name: "kv", Config: map[string]any{"store_method": "in_memory"}}, Config{}, env(nil)); err != nil || !p.Memory {
		t.Fatalf("in_memory: %+v %v", p, err)
	}
	local := AdapterRule{Worker: "pubsub", Local: []string{"local"}, Refused: []string{"redis"}}
	if p, err = local.Resolve(&Adapter{Name: "local"}, Config{}, env(nil)); err != nil || p != (Placement{}) {
		t.Fatalf("local: %+v %v", p, err)
	}
}

// TestResolveRefuses: each refusal is coded and names the key and the value.
func TestResolveRefuses(t *testing.T) {
	local := AdapterRule{Worker: "pubsub", Local: []string{"local"}, Refused: []string{"redis"}}
	for _, c := range []struct {
		rule AdapterRule
		a    Adapter
		nats Config
		code string
		want []string
	}{
		{stateRule, Adapter{Name: "redis", Config: map[string]any{"redis_url": "redis://x"}}, Config{}, errcode.ConfigUnsupported, []string{"adapter.name", `"redis"`}},
		{stateRule, Adapter{Name: "bridge"}, Config{}, errcode.ConfigUnsupported, []string{"adapter.name", `"bridge"`}},
		{stateRule, Adapter{Name: "memcached"}, Config{}, errcode.ConfigInvalid, []string{"adapter.name", "memcached"}},
		{stateRule, Adapter{}, Config{}, errcode.ConfigInvalid, []string{"adapter.name is required"}},
		{stateRule, Adapter{Name: "kv", Config: map[string]any{"lock_ttl_ms": 1}}, Config{}, errcode.ConfigUnsupported, []string{"adapter.config.lock_ttl_ms"}},
		{stateRule, Adapter{Name: "kv", Config: map[string]any{"store_method": "disk"}}, Config{}, errcode.ConfigInvalid, []string{"store_method", "disk"}},
		{stateRule, Adapter{Name: "kv", Config: map[string]any{"save_interval_ms": 1}}, Config{}, errcode.ConfigInvalid, []string{"save_interval_ms"}},
		{stateRule, Adapter{Name: "kv", Config: map[string]any{"store_method": "in_memory"}}, Config{URL: "nats://x"}, errcode.ConfigInvalid, []string{"nats.url"}},
		{stateRule, Adapter{Name: "kv", Config: map[string]any{"file_path": "/d"}}, Config{DataDir: "/e"}, errcode.ConfigInvalid, []string{"nats.data_dir"}},
		{local, Adapter{Name: "local", Config: map[string]any{"x": 1}}, Config{}, errcode.ConfigInvalid, []string{"adapter.config.x"}},
	} {
		_, err := c.rule.Resolve(&c.a, c.nats, env(nil))
		var ce *errcode.Error
		if !errors.As(err, &ce) || ce.Code != c.code {
			t.Errorf("%+v: %v, want %s", c.a, err, c.code)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v does not name %s", c.a, err, w)
			}
		}
	}
}

// TestOpenPlacedInMemory: an in-memory placement starts empty each time and leaves no
// directory behind; a file_path placement keeps its data.
func TestOpenPlacedInMemory(t *testing.T) {
	ctx := context.Background()
	s, err := OpenPlaced(ctx, Config{}, Placement{Memory: true}, "", "mem")
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "v")
	dir := s.tmp
	s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the in-memory directory %s is left: %v", dir, err)
	}
	s, err = OpenPlaced(ctx, Config{}, Placement{Memory: true}, "", "mem")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.JS.KeyValue(ctx, "kv"); err == nil {
		t.Error("a restarted in-memory store still has the bucket")
	}
	s.Close()
	file := filepath.Join(t.TempDir(), "store")
	s, err = OpenPlaced(ctx, Config{}, Placement{Dir: file}, "", "file")
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "v")
	s.Close()
	s, err = OpenPlaced(ctx, Config{}, Placement{Dir: file}, "", "file")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := get(t, s, "k"); got != "v" {
		t.Errorf("file_path store lost k: %q", got)
	}
}
