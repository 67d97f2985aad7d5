// Package config reads the engine's config.yaml: strict keys, list-shaped workers (legacy
// modules), ${VAR:default} expansion, the top-level sandbox: binding and token-protected
// namespaces.
//
//	registration_namespace_grace_ms: 1000
//	workers:
//	  - name: iii-worker-manager
//	    config:
//	      host: 127.0.0.1
//	      port: ${III_PORT:49134}
//	      handshake_timeout_ms: 10000        # a socket that sends no upgrade request by then is closed
//	      allowed_origins: ["http://localhost:3000"]  # browser pages admitted besides same-origin
//	  - name: configuration
//	    config: {adapter: {name: fs, config: {directory: ./config}}}
//	sandbox:                     # binds the sandbox router; both keys optional
//	  adapter: sandbox-libkrun
//	  namespace: default
//	namespaces:                  # token-protected namespaces (Compose writes them for an engine
//	                             # it starts and prints them for one you run)
//	  - name: myproject
//	    token_file: /path/to/token   # mode 0600; the token itself is never in this file
//	    owner_token_file: /path/to/owner-token # optional, mode 0600: its holder (Compose) may also
//	                                           # register here and call configuration::publish and
//	                                           # engine::sandbox::bind; the project token may not
//
// Every iii-worker-manager entry (plain, or named "iii-worker-manager#<name>") is a listener
// with its own host, port, handshake_timeout_ms, allowed_origins and, as iii defines them,
// middleware_function_id and rbac: (package rbac); the first is the main one (the owner
// credential and `iii call` address it). Two listeners on one port are refused (CONFIG_INVALID
// naming both lines).
//
//   - name: iii-worker-manager#public
//     config:
//     port: 49135
//     middleware_function_id: my::middleware   # called instead of every non-engine function
//     rbac:
//     auth_function_id: my::auth             # once per upgrade; missing/error/timeout = refused
//     expose_functions: [match("api::*"), {metadata: {public: true}}]
//     on_function_registration_function_id: my::on-fn   # also on_trigger_registration_...,
//     # on_trigger_type_registration_...
//
// Keys this engine parses but does not implement are refused with CONFIG_UNSUPPORTED naming the
// key, never accepted and ignored: a second instance of another engine worker ("#instance" or a
// second entry of the same name), a non-zero ttl_seconds, and iii-stream's adapters other than
// kv (redis, bridge). iii-http-functions takes iii's security: {url_allowlist,
// block_private_ips, require_https} and this engine's secrets: {NAME: {env, hosts}}, the only
// values an HTTP-invoked function's auth may name; it serves HTTP-invoked functions whether
// declared or not.
// iii-stream, when declared, is served in the engine's process with iii's keys:
//
//	workers:
//	  - name: iii-stream
//	    config:
//	      host: 127.0.0.1          # default 127.0.0.1 (iii's: 0.0.0.0)
//	      port: ${STREAM_PORT:3112}
//	      auth_function: my::auth  # optional
//	      adapter: {name: kv, config: {store_method: file_based, file_path: ./data/streams}}
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/interpolate"
)

// Defaults.
const (
	DefaultHost             = "127.0.0.1"
	DefaultPort             = 49134
	DefaultHandshakeMS      = 10000
	ListenerWorker          = "iii-worker-manager"
	DefaultGraceMS          = 1000
	DefaultConfigDir        = "./config"
	DefaultSandboxAdapter   = scode.AdapterName
	DefaultSandboxNamespace = "default"
	// MigrationDocs is where UNSUPPORTED_CONFIG_WORKERS points.
	MigrationDocs = "https://iii.dev/docs/upgrading/workers-to-compose"
)

// Config is a parsed config.yaml.
type Config struct {
	Path    string // file it came from; "" for defaults
	GraceMS int
	// Listeners are the iii-worker-manager entries in file order; never empty (the default
	// listener when none is declared). The first is the main one.
	Listeners  []Listener
	ConfigDir  string   // configuration worker's fs directory
	Sandbox    *Sandbox // nil: no adapter bound
	Namespaces []Namespace
	Declared   []string // engine workers declared in workers:, in file order
	// HTTPSecurity is iii-http-functions' security: block (iii's defaults when absent).
	HTTPSecurity HTTPSecurity
	// Stream is iii-stream's config when it is declared, nil otherwise.
	Stream *Stream
	// Cluster is the cluster: section, nil when the engine runs alone.
	Cluster *Cluster
}

// Defaults of iii-stream.
const (
	DefaultStreamHost = "127.0.0.1"
	DefaultStreamPort = 3112
)

// invalid is a CONFIG_INVALID error, prefixed with its line of config.yaml when known (line > 0);
// %w keeps the cause.
func invalid(line int, format string, args ...any) *errcode.Error {
	if line > 0 {
		format, args = "line %d: "+format, append([]any{line}, args...)
	}
	return errcode.New(errcode.ConfigInvalid, format, args...)
}

// refuseKey refuses a key this engine parses but does not implement, so that nothing a user
// configures (access control above all) is accepted and ignored.
func refuseKey(line int, format string, args ...any) *errcode.Error {
	e := invalid(line, format, args...)
	e.Code = errcode.ConfigUnsupported
	e.Message += "; this engine does not implement it and refuses to start rather than ignore it"
	return e
}

// Default is the configuration used when there is no file.
func Default() *Config {
	return &Config{GraceMS: DefaultGraceMS, Listeners: []Listener{defaultListener()}, ConfigDir: DefaultConfigDir,
		HTTPSecurity: HTTPSecurity{URLAllowlist: []string{"*"}, BlockPrivateIPs: true, RequireHTTPS: true}}
}

// Load reads and parses path, expanding its placeholders from lookup (os.LookupEnv in the binary).
func Load(path string, lookup func(string) (string, bool)) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b, lookup, filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	c.Path = path
	return c, nil
}

// Parse parses a config file, expanding ${VAR} and ${VAR:default} in its values (see package
// interpolate); an unset VAR without default is an error; baseDir resolves relative token_file paths.
func Parse(raw []byte, lookup func(string) (string, bool), baseDir string) (*Config, error) {
	doc, unset, err := interpolate.YAML(raw, lookup)
	if err != nil {
		return nil, &errcode.Error{Code: errcode.ConfigInvalid, Message: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	if len(unset) > 0 {
		missing := make([]string, len(unset))
		for i, m := range unset {
			missing[i] = fmt.Sprintf("%s (line %d)", m.Name, m.Line)
		}
		return nil, &errcode.Error{Code: errcode.ConfigInvalid, Message: "environment variable(s) not set and no default given: " + strings.Join(missing, ", ")}
	}
	c := Default()
	if len(doc.Content) == 0 {
		return c, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, invalid(root.Line, "the file must be a mapping of keys")
	}
	var unsupported []string
	seen := map[string]bool{}
	entries := map[string]int{} // engine worker name -> line of its entry, across workers and modules
	c.Listeners = nil
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			return nil, invalid(k.Line, "key %q appears twice", k.Value)
		}
		seen[k.Value] = true
		switch k.Value {
		case "registration_namespace_grace_ms":
			if c.GraceMS, err = intValue(v, k.Value); err != nil {
				return nil, err
			}
		case "workers", "modules":
			u, err := c.parseWorkers(k.Value, v, entries)
			if err != nil {
				return nil, err
			}
			unsupported = append(unsupported, u...)
		case "sandbox":
			if c.Sandbox, err = parseSandbox(v); err != nil {
				return nil, err
			}
		case "namespaces":
			if c.Namespaces, err = parseNamespaces(v, baseDir); err != nil {
				return nil, err
			}
		case "cluster":
			if c.Cluster, err = parseCluster(v, baseDir); err != nil {
				return nil, err
			}
		default:
			return nil, invalid(k.Line, "unknown key %q; allowed: registration_namespace_grace_ms, workers (or modules), sandbox, namespaces, cluster", k.Value)
		}
	}
	if len(c.Listeners) == 0 {
		c.Listeners = []Listener{defaultListener()}
	}
	if err := distinctPorts(c.Listeners); err != nil {
		return nil, err
	}
	if len(unsupported) > 0 {
		return nil, &errcode.Error{Code: errcode.UnsupportedConfigWorkers, Message: "Workers in config.yaml are no longer supported:\n" +
			strings.Join(unsupported, "\n") + "\n\nSee: " + MigrationDocs}
	}
	return c, nil
}

// configurable are the engine workers config.yaml may declare.
var configurable = map[string]bool{"configuration": true, "iii-worker-manager": true, "iii-http-functions": true, "iii-stream": true}

// Advice says where an unsupported config.yaml worker went. iii-sandbox is one: it fails startup
// with UNSUPPORTED_CONFIG_WORKERS (req E8).
func Advice(name string) string {
	switch name {
	case "iii-http", "http":
		return "move to worker-compose.yaml as 'http'"
	case "iii-cron", "cron":
		return "move to worker-compose.yaml as 'cron'"
	case "iii-queue", "queue":
		return "move to worker-compose.yaml as 'queue'"
	case "iii-state", "state":
		return "move to worker-compose.yaml as 'state'"
	case "iii-pubsub", "pubsub":
		return "move to worker-compose.yaml as 'pubsub'"
	case "iii-bridge", "bridge":
		return "move to worker-compose.yaml as 'bridge'"
	case "iii-exec":
		return "translate to Compose lifecycle scripts"
	case "iii-engine-functions", "iii-telemetry", "iii-observability":
		return "remove this redundant entry; the engine provides it automatically"
	case "iii-sandbox":
		return "remove this entry; the engine carries the sandbox router. Run the adapter as the " +
			"'sandbox-libkrun' worker (iii call compose::add worker=iii-sandbox) and bind it with a " +
			"top-level 'sandbox:' section (adapter, namespace)"
	}
	return "move this worker to worker-compose.yaml"
}

// parseWorkers reads one workers: (or modules:) list; entries holds the line of each engine
// worker already declared, so a second entry of one is refused.
func (c *Config) parseWorkers(key string, v *yaml.Node, entries map[string]int) ([]string, error) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil, invalid(v.Line, "%s: must be a list; write `%s: []` for none", key, key)
	}
	if v.Kind != yaml.SequenceNode {
		return nil, invalid(v.Line, "%s: must be a list of {name, config} entries", key)
	}
	var unsupported []string
	for i, e := range v.Content {
		name, cfg, err := workerEntry(key, i, e)
		if err != nil {
			return nil, err
		}
		base, instance, _ := strings.Cut(name, "#")
		if !configurable[base] {
			unsupported = append(unsupported, fmt.Sprintf("- '%s' -> %s", base, Advice(base)))
			continue
		}
		for j := 0; j+1 < len(e.Content); j += 2 {
			if e.Content[j].Value == "image" {
				return nil, invalid(e.Content[j].Line, "%s: 'image' is not allowed on an engine worker", name)
			}
		}
		if base == ListenerWorker {
			c.Declared = append(c.Declared, name)
			l := defaultListener()
			l.Name, l.Line = name, e.Line
			if cfg != nil {
				if err := parseListener(&l, cfg); err != nil {
					return nil, err
				}
			}
			c.Listeners = append(c.Listeners, l)
			continue
		}
		if instance != "" {
			return nil, refuseKey(e.Line, "%s[%d]: %q is a second instance of %s (a \"#%s\" suffix)", key, i, name, base, instance)
		}
		if first, ok := entries[base]; ok {
			return nil, refuseKey(e.Line, "%s[%d]: a second %q entry, after the one on line %d, is a second instance of %s: this engine runs one %s",
				key, i, name, first, base, base)
		}
		entries[base] = e.Line
		c.Declared = append(c.Declared, name)
		if base == "iii-stream" {
			c.Stream = &Stream{Host: DefaultStreamHost, Port: DefaultStreamPort}
		}
		if cfg == nil {
			continue
		}
		switch base {
		case "configuration":
			err = c.parseConfiguration(cfg)
		case "iii-http-functions":
			err = c.parseHTTPFunctions(cfg)
		case "iii-stream":
			err = c.parseStream(cfg)
		}
		if err != nil {
			return nil, err
		}
	}
	return unsupported, nil
}

// workerEntry reads entry i of list key: its name (required) and its config (nil when absent).
func workerEntry(key string, i int, e *yaml.Node) (name string, cfg *yaml.Node, err error) {
	if e.Kind != yaml.MappingNode {
		return "", nil, invalid(e.Line, "%s[%d]: must be a mapping with a name", key, i)
	}
	for j := 0; j+1 < len(e.Content); j += 2 {
		ek, ev := e.Content[j], e.Content[j+1]
		switch ek.Value {
		case "name":
			name = ev.Value
		case "config":
			cfg = ev
		case "image":
		default:
			return "", nil, invalid(ek.Line, "unknown key %q in %s[%d]; allowed: name, image, config", ek.Value, key, i)
		}
	}
	if name == "" {
		return "", nil, invalid(e.Line, "%s[%d]: name is required", key, i)
	}
	return name, cfg, nil
}
