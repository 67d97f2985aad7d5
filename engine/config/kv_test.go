package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/iii-go/iii/internal/base/errcode"
)

// TestKVSet: the three keys of iii's kv adapter config, as the engine and the workers read them.
func TestKVSet(t *testing.T) {
	var kv KV
	for k, v := range map[string]any{"store_method": "in_memory", "file_path": "./data", "save_interval_ms": 5000} {
		if ok, err := kv.Set("adapter.config.", k, v); !ok || err != nil {
			t.Fatalf("%s: %v %v", k, ok, err)
		}
	}
	if !kv.Memory || kv.FilePath != "./data" {
		t.Errorf("got %+v", kv)
	}
	if ok, err := kv.Set("adapter.config.", "save_interval_ms", "100"); !ok || err != nil {
		t.Errorf("save_interval_ms \"100\": %v %v", ok, err)
	}
	if ok, err := kv.Set("adapter.config.", "ttl", 1); ok || err != nil {
		t.Errorf("ttl is not a kv key: %v %v", ok, err)
	}
	for _, c := range []struct {
		key  string
		v    any
		want string
	}{
		{"store_method", "tape", `p: store_method "tape": use file_based or in_memory`},
		{"store_method", nil, `store_method "<nil>"`},
		{"file_path", "", "p: file_path must be a directory path"},
		{"file_path", 3, "p: file_path must be a directory path"},
		{"save_interval_ms", 99, "p: save_interval_ms 99: it must be a number of milliseconds from 100 to 3600000"},
		{"save_interval_ms", "3600001", "save_interval_ms 3600001"},
		{"save_interval_ms", "soon", "save_interval_ms soon"},
	} {
		_, err := kv.Set("p: ", c.key, c.v)
		var ce *errcode.Error
		if !errors.As(err, &ce) || ce.Code != errcode.ConfigInvalid || !strings.Contains(ce.Message, c.want) {
			t.Errorf("%s %v: got %v, want CONFIG_INVALID naming %s", c.key, c.v, err, c.want)
		}
	}
}
