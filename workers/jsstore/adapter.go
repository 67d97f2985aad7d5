package jsstore

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/iii-go/iii/engine/config"
	"github.com/iii-go/iii/internal/base/errcode"
)

// EnvComposeDir is the directory of the Compose file a worker runs for (Compose sets it): a
// relative file_path is resolved there, as iii resolves it against the directory the engine
// of the project runs in.
const EnvComposeDir = "III_COMPOSE_DIR"

// Adapter is iii's adapter entry of a worker's configuration: {name, config}. iii's files
// carry one for state, stream, pubsub, cron and queue; AdapterRule.Resolve maps it onto this
// project's store or refuses it.
type Adapter struct {
	Name   string         `yaml:"name"`
	Config map[string]any `yaml:"config"`
}

// AdapterRule is what one worker makes of iii's adapters.
type AdapterRule struct {
	// Worker names the worker in messages ("state").
	Worker string
	// Store are the adapter names served by this project's JetStream store (iii's kv, builtin):
	// they take config.KVKeys (store_method, file_path, save_interval_ms).
	Store []string
	// Local are the adapter names served in the worker's own process (iii's local): no config.
	Local []string
	// Refused are iii's adapters this project does not have (redis, rabbitmq, bridge).
	Refused []string
}

// Placement is where the worker keeps its data as its adapter says.
type Placement struct {
	// Memory: store_method in_memory. The store lives in a directory of its own that Close
	// removes, so nothing outlives the worker, as iii's in-memory store.
	Memory bool
	// Dir is file_path, made absolute ("" leaves the worker's default directory).
	Dir string
}

// Resolve checks a (nil: no adapter key) against the rule and the nats: block of the same
// configuration. Errors are coded and name the key and its value: an adapter or key iii has
// and this project does not is CONFIG_UNSUPPORTED, anything else wrong CONFIG_INVALID.
// store_method defaults to file_based (durable), where iii's kv keeps data in memory: a
// project that wants it gone at stop says in_memory.
func (r AdapterRule) Resolve(a *Adapter, nats Config, lookupEnv func(string) (string, bool)) (Placement, error) {
	var p Placement
	if a == nil {
		return p, nil
	}
	known := append(append(append([]string{}, r.Store...), r.Local...), r.Refused...)
	switch {
	case a.Name == "":
		return p, errcode.New(errcode.ConfigInvalid, "%s worker: adapter.name is required (%s)", r.Worker, strings.Join(r.accepted(), " or "))
	case slices.Contains(r.Refused, a.Name):
		return p, errcode.New(errcode.ConfigUnsupported, "%s worker: adapter.name %q is iii's and not supported here: this worker keeps its data in NATS JetStream "+
			"(adapter %s); to share it between machines point nats.url at one NATS cluster", r.Worker, a.Name, strings.Join(r.accepted(), " or "))
	case !slices.Contains(known, a.Name):
		return p, errcode.New(errcode.ConfigInvalid, "%s worker: adapter.name %q is unknown; use %s", r.Worker, a.Name, strings.Join(r.accepted(), " or "))
	case slices.Contains(r.Local, a.Name):
		if k := firstKey(a.Config); k != "" {
			return p, errcode.New(errcode.ConfigInvalid, "%s worker: adapter.config.%s: the %s adapter takes no configuration", r.Worker, k, a.Name)
		}
		return p, nil
	}
	keys := make([]string, 0, len(a.Config))
	for k := range a.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var kv config.KV
	for _, k := range keys {
		if ok, err := kv.Set(r.Worker+" worker: adapter.config.", k, a.Config[k]); err != nil {
			return p, err
		} else if !ok {
			return p, errcode.New(errcode.ConfigUnsupported, "%s worker: adapter.config.%s is not supported by the %s adapter here (the keys are %s)", r.Worker, k, a.Name, strings.Join(config.KVKeys, ", "))
		}
	}
	p.Memory, p.Dir = kv.Memory, kv.FilePath
	if p.Memory && p.Dir != "" {
		return p, errcode.New(errcode.ConfigInvalid, "%s worker: adapter.config.file_path %q with store_method in_memory: an in-memory store has no file; drop one of them", r.Worker, p.Dir)
	}
	if nats.URL != "" && (p.Memory || p.Dir != "") {
		return p, errcode.New(errcode.ConfigInvalid, "%s worker: adapter.config (store_method/file_path) and nats.url both say where the data lives; keep one", r.Worker)
	}
	if p.Dir != "" && nats.DataDir != "" {
		return p, errcode.New(errcode.ConfigInvalid, "%s worker: adapter.config.file_path and nats.data_dir both say where the data lives; keep one", r.Worker)
	}
	if p.Memory && nats.DataDir != "" {
		return p, errcode.New(errcode.ConfigInvalid, "%s worker: adapter.config.store_method in_memory and nats.data_dir: an in-memory store has no directory; drop one of them", r.Worker)
	}
	if p.Dir != "" && !filepath.IsAbs(p.Dir) {
		base, _ := lookupEnv(EnvComposeDir)
		if base == "" {
			var err error
			if base, err = os.Getwd(); err != nil {
				return p, fmt.Errorf("%s worker: resolving adapter.config.file_path %q: %w", r.Worker, p.Dir, err)
			}
		}
		p.Dir = filepath.Join(base, p.Dir)
	}
	return p, nil
}

// accepted are the adapter names the rule serves.
func (r AdapterRule) accepted() []string {
	return append(append([]string{}, r.Store...), r.Local...)
}

func firstKey(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}
