package config

import (
	"fmt"
	"strconv"

	"github.com/iii-go/iii/internal/base/errcode"
)

// KVKeys are the keys of iii's kv adapter config that every store of this project takes: the
// engine's iii-stream and the state, stream, pubsub, cron and queue workers.
var KVKeys = []string{"store_method", "file_path", "save_interval_ms"}

// KV is what iii's kv adapter config ({store_method, file_path, save_interval_ms}) says of
// where a store keeps its data. One parser for the engine's config.yaml and the workers'
// configurations, so a file valid for one is valid for the others.
type KV struct {
	// Memory is store_method: in_memory (file_based, the default, leaves it false).
	Memory bool
	// FilePath is file_path as written: the directory of the store ("" for the default).
	FilePath string
}

// Set applies one key of a kv adapter config to kv; ok is false for a key not in KVKeys,
// which the caller refuses or takes in its own way. value is as YAML decodes it (a string or
// a number; nil for a null or a non-scalar). prefix starts each message and names the block
// the key is in ("adapter.config.", "line 3: iii-stream kv adapter config: "). Errors are
// CONFIG_INVALID and name the key and its value.
func (kv *KV) Set(prefix, key string, value any) (ok bool, err error) {
	switch key {
	case "store_method":
		switch value {
		case "file_based":
		case "in_memory":
			kv.Memory = true
		default:
			return true, errcode.New(errcode.ConfigInvalid, "%sstore_method %q: use file_based or in_memory", prefix, fmt.Sprint(value))
		}
	case "file_path":
		s, isString := value.(string)
		if !isString || s == "" {
			return true, errcode.New(errcode.ConfigInvalid, "%sfile_path must be a directory path", prefix)
		}
		kv.FilePath = s
	case "save_interval_ms":
		// iii flushes its file every save_interval_ms; JetStream stores each write as it is
		// acknowledged, so there is no interval to pace. The value is checked against iii's
		// bounds so a file valid for iii is valid here.
		if n, err := strconv.Atoi(fmt.Sprint(value)); err != nil || n < 100 || n > 3_600_000 {
			return true, errcode.New(errcode.ConfigInvalid, "%ssave_interval_ms %v: it must be a number of milliseconds from 100 to 3600000", prefix, value)
		}
	default:
		return false, nil
	}
	return true, nil
}
