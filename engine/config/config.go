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
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/engine/rbac"
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

// Cluster joins engines that share functions over NATS (cluster: {key_file, insecure, nats:
// {url, creds_file, nkey_file, tls_cert_file, tls_key_file, tls_ca_file}}). Paths are made
// absolute against the config file's directory.
type Cluster struct {
	URL       string // one or more nats:// URLs, comma-separated
	CredsFile string // a NATS credentials file; "" for none
	NkeyFile  string // a NATS nkey seed file; "" for none
	// TLSCertFile and TLSKeyFile are the engine's TLS client certificate and key, TLSCAFile the
	// servers' CA; "" for none.
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// KeyFile holds the cluster key the engines share (mode 0600); required.
	KeyFile string
	// Insecure admits a NATS link without credentials (a warning says so at start).
	Insecure bool
}

// Listener is one iii-worker-manager entry: a WebSocket listener for workers.
type Listener struct {
	Name               string // the entry's name: iii-worker-manager or iii-worker-manager#<name>
	Line               int    // of the entry; 0 for the default listener
	Host               string
	Port               int
	HandshakeTimeoutMS int
	AllowedOrigins     []string // browser origins admitted besides same-origin
	// MiddlewareFunctionID is called, instead of the function, for every call a connection of
	// this listener makes to a function that is not the engine's.
	MiddlewareFunctionID string
	RBAC                 *rbac.Config // nil: no access control on this listener
}

// Main is the main listener: the first iii-worker-manager entry.
func (c *Config) Main() Listener { return c.Listeners[0] }

func defaultListener() Listener {
	return Listener{Name: ListenerWorker, Host: DefaultHost, Port: DefaultPort, HandshakeTimeoutMS: DefaultHandshakeMS}
}

// Stream is iii-stream's config: the WebSocket endpoint and the kv adapter's store.
type Stream struct {
	Host string
	Port int
	// AuthFunction is called for each new WebSocket connection; "" for none.
	AuthFunction string
	// Memory is store_method: in_memory (items lost when the engine stops).
	Memory bool
	// FilePath is the kv adapter's file_path: the directory of the store ("" for
	// ~/.iii/data/stream/<namespace>).
	FilePath string
	// AllowedOrigins, JoinTimeoutMS, IdleTimeoutMS, MaxConnections and
	// MaxConnectionsPerAddress bound the WebSocket port (this engine's keys; see
	// workers/stream.Limits). 0 is the default.
	AllowedOrigins                                                         []string
	JoinTimeoutMS, IdleTimeoutMS, MaxConnections, MaxConnectionsPerAddress int
}

// Defaults of iii-stream.
const (
	DefaultStreamHost = "127.0.0.1"
	DefaultStreamPort = 3112
)

// HTTPSecurity is iii-http-functions config security: {url_allowlist, block_private_ips,
// require_https}, iii's keys, and this engine's secrets:; see package httpfn.
type HTTPSecurity struct {
	URLAllowlist    []string
	BlockPrivateIPs bool
	RequireHTTPS    bool
	// Secrets are the only values an HTTP-invoked function's auth may name (its *_key), by
	// name; none when absent, so a worker cannot have any of the engine's environment sent.
	Secrets map[string]HTTPSecret
}

// HTTPSecret is one entry of iii-http-functions secrets: NAME: {env, hosts}: the environment
// variable holding it (default NAME) and the URL host patterns it may be sent to.
type HTTPSecret struct {
	Env   string
	Hosts []string
}

// Sandbox is the top-level sandbox: section, which binds the sandbox router (req E3).
type Sandbox struct {
	Adapter   string // function prefix of the adapter
	Namespace string // namespace the adapter runs in
}

// Namespace is one token-protected namespace.
type Namespace struct {
	Name           string
	TokenFile      string // absolute
	OwnerTokenFile string // absolute; empty when no one holds owner rights through this namespace
}

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

func mapping(v *yaml.Node, what string, allowed []string, fn func(k, v *yaml.Node) error) error {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		return invalid(v.Line, "%s must be a mapping", what)
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k := v.Content[i]
		ok := false
		for _, a := range allowed {
			ok = ok || a == k.Value
		}
		if !ok {
			return invalid(k.Line, "unknown key %q in %s; allowed: %s", k.Value, what, strings.Join(allowed, ", "))
		}
		if err := fn(k, v.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// distinctPorts refuses two listeners on one port (0, a port the system picks, excepted).
func distinctPorts(ls []Listener) error {
	byPort := map[int]Listener{}
	for _, l := range ls {
		if l.Port == 0 {
			continue
		}
		if o, ok := byPort[l.Port]; ok {
			return invalid(l.Line, "listener %q: port %d is already the port of listener %q on line %d; give every iii-worker-manager entry its own port",
				l.Name, l.Port, o.Name, o.Line)
		}
		byPort[l.Port] = l
	}
	return nil
}

var listenerKeys = []string{"host", "port", "handshake_timeout_ms", "allowed_origins", "middleware_function_id", "rbac"}

func parseListener(l *Listener, v *yaml.Node) error {
	what := l.Name + " config"
	return mapping(v, what, listenerKeys, func(k, v *yaml.Node) error {
		var err error
		switch k.Value {
		case "allowed_origins":
			l.AllowedOrigins, err = originList(v)
		case "host":
			l.Host, err = strValue(v, k.Value)
			if err == nil && l.Host == "" {
				err = invalid(v.Line, "host must not be empty")
			}
		case "port":
			l.Port, err = intValue(v, k.Value)
			if err == nil && (l.Port < 0 || l.Port > 65535) {
				err = invalid(v.Line, "port %d is out of range", l.Port)
			}
		case "handshake_timeout_ms":
			l.HandshakeTimeoutMS, err = intValue(v, k.Value)
			if err == nil && l.HandshakeTimeoutMS <= 0 {
				err = invalid(v.Line, "handshake_timeout_ms must be positive, got %d", l.HandshakeTimeoutMS)
			}
		case "middleware_function_id":
			l.MiddlewareFunctionID, err = functionID(v, what+": middleware_function_id")
		case "rbac":
			l.RBAC, err = parseRBAC(v, l.Name+" rbac")
		}
		return err
	})
}

// ParseRBAC reads an rbac: block (package rbac) as a listener takes it, for the rbac-proxy
// worker's own: an empty or null one exposes nothing but the infrastructure functions; what
// names the block in errors (CONFIG_INVALID, with the line).
func ParseRBAC(v *yaml.Node, what string) (*rbac.Config, error) { return parseRBAC(v, what) }

// parseRBAC reads an rbac: block (package rbac); an empty or null one exposes nothing but the
// infrastructure functions.
func parseRBAC(v *yaml.Node, what string) (*rbac.Config, error) {
	r := &rbac.Config{}
	err := mapping(v, what, rbac.Keys, func(k, v *yaml.Node) error {
		var err error
		key := what + "." + k.Value
		switch k.Value {
		case "auth_function_id":
			r.AuthFunctionID, err = functionID(v, key)
		case "on_function_registration_function_id":
			r.OnFunctionRegistration, err = functionID(v, key)
		case "on_trigger_registration_function_id":
			r.OnTriggerRegistration, err = functionID(v, key)
		case "on_trigger_type_registration_function_id":
			r.OnTriggerTypeRegistration, err = functionID(v, key)
		case "expose_functions":
			if v.Kind != yaml.SequenceNode {
				return invalid(v.Line, "%s must be a list of filters: match(\"api::*\") or {metadata: {key: value}}", key)
			}
			r.Expose = []rbac.Filter{}
			for _, e := range v.Content {
				var raw any
				if err := e.Decode(&raw); err != nil {
					return invalid(e.Line, "%s: %w", key, err)
				}
				f, err := rbac.ParseFilter(raw)
				if err != nil {
					return invalid(e.Line, "%s: %w", key, err)
				}
				r.Expose = append(r.Expose, f)
			}
		}
		return err
	})
	return r, err
}

// functionID reads a function id setting: a non-empty string.
func functionID(v *yaml.Node, key string) (string, error) {
	s, err := strValue(v, key)
	if err == nil && strings.TrimSpace(s) == "" {
		err = invalid(v.Line, "%s must name a function", key)
	}
	return s, err
}

func (c *Config) parseConfiguration(v *yaml.Node) error {
	return mapping(v, "configuration config", []string{"adapter", "ttl_seconds"}, func(k, v *yaml.Node) error {
		if k.Value == "ttl_seconds" {
			ttl, err := intValue(v, k.Value)
			if err == nil && ttl != 0 {
				err = refuseKey(k.Line, "configuration config: ttl_seconds: %d (entries that expire)", ttl)
			}
			return err
		}
		return mapping(v, "configuration adapter", []string{"name", "config"}, func(k, v *yaml.Node) error {
			if k.Value == "name" {
				if v.Value != "fs" {
					return invalid(v.Line, "configuration adapter %q is not supported; use fs", v.Value)
				}
				return nil
			}
			return mapping(v, "fs adapter config", []string{"directory"}, func(k, v *yaml.Node) error {
				var err error
				c.ConfigDir, err = strValue(v, k.Value)
				return err
			})
		})
	})
}

// parseStream reads iii-stream config: {host, port, auth_function, adapter: {name: kv, config:
// {store_method, file_path}}}, and this engine's bounds of the WebSocket port: allowed_origins,
// join_timeout_ms, idle_timeout_ms, max_connections, max_connections_per_address. The adapters
// redis and bridge are iii's and refused here.
func (c *Config) parseStream(v *yaml.Node) error {
	st := c.Stream
	return mapping(v, "iii-stream config", []string{"host", "port", "adapter", "auth_function", "allowed_origins",
		"join_timeout_ms", "idle_timeout_ms", "max_connections", "max_connections_per_address"}, func(k, v *yaml.Node) error {
		var err error
		limit := func(dst *int) {
			if *dst, err = intValue(v, k.Value); err == nil && *dst < 0 {
				err = invalid(v.Line, "iii-stream config: %s is %d: it must be 0 (the default) or more", k.Value, *dst)
			}
		}
		switch k.Value {
		case "allowed_origins":
			st.AllowedOrigins, err = streamOrigins(v)
		case "join_timeout_ms":
			limit(&st.JoinTimeoutMS)
		case "idle_timeout_ms":
			limit(&st.IdleTimeoutMS)
		case "max_connections":
			limit(&st.MaxConnections)
		case "max_connections_per_address":
			limit(&st.MaxConnectionsPerAddress)
		case "auth_function":
			st.AuthFunction, err = strValue(v, k.Value)
		case "host":
			st.Host, err = strValue(v, k.Value)
			if err == nil && st.Host == "" {
				err = invalid(v.Line, "iii-stream config: host must not be empty")
			}
		case "port":
			st.Port, err = intValue(v, k.Value)
			if err == nil && (st.Port < 0 || st.Port > 65535) {
				err = invalid(v.Line, "iii-stream config: port %d is out of range", st.Port)
			}
		case "adapter":
			err = c.parseStreamAdapter(v)
		}
		return err
	})
}

func (c *Config) parseStreamAdapter(v *yaml.Node) error {
	var name *yaml.Node
	var conf *yaml.Node
	if err := mapping(v, "iii-stream adapter", []string{"name", "config"}, func(k, v *yaml.Node) error {
		if k.Value == "name" {
			name = v
		} else {
			conf = v
		}
		return nil
	}); err != nil {
		return err
	}
	if name == nil {
		return invalid(v.Line, "iii-stream adapter: name is required (kv)")
	}
	switch name.Value {
	case "kv":
	case "redis", "bridge":
		return refuseKey(name.Line, "iii-stream adapter: name %q: this engine keeps streams in JetStream (adapter kv, the default); "+
			"to share streams between engines run the stream worker with nats.url", name.Value)
	default:
		return invalid(name.Line, "iii-stream adapter: unknown adapter %q; use kv", name.Value)
	}
	if conf == nil {
		return nil
	}
	kv := KV{Memory: c.Stream.Memory, FilePath: c.Stream.FilePath}
	err := mapping(conf, "iii-stream kv adapter config", append(slices.Clone(KVKeys), "channel_size"), func(k, v *yaml.Node) error {
		if k.Value == "channel_size" {
			return refuseKey(k.Line, "iii-stream kv adapter config: channel_size: this engine's stream does not drop events behind a bounded channel")
		}
		var value any
		if v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
			value = v.Value
		}
		_, err := kv.Set(fmt.Sprintf("line %d: iii-stream kv adapter config: ", v.Line), k.Value, value)
		return err
	})
	c.Stream.Memory, c.Stream.FilePath = kv.Memory, kv.FilePath
	return err
}

// parseHTTPFunctions reads iii-http-functions config: {security: {url_allowlist,
// block_private_ips, require_https}, secrets: {NAME: {env, hosts}}}.
func (c *Config) parseHTTPFunctions(v *yaml.Node) error {
	return mapping(v, "iii-http-functions config", []string{"security", "secrets"}, func(k, v *yaml.Node) error {
		if k.Value == "secrets" {
			return c.parseHTTPSecrets(v)
		}
		return mapping(v, "iii-http-functions security", []string{"url_allowlist", "block_private_ips", "require_https"}, func(k, v *yaml.Node) error {
			var err error
			switch k.Value {
			case "url_allowlist":
				if v.Kind != yaml.SequenceNode {
					return invalid(v.Line, "iii-http-functions security.url_allowlist must be a list of host patterns, e.g. [\"api.example.com\", \"*.example.com\"]")
				}
				c.HTTPSecurity.URLAllowlist = []string{}
				for _, e := range v.Content {
					p, err := strValue(e, "url_allowlist entry")
					if err != nil {
						return err
					}
					if _, err := path.Match(p, ""); err != nil || strings.TrimSpace(p) == "" {
						return invalid(e.Line, "iii-http-functions security.url_allowlist: %q is not a valid host pattern", p)
					}
					c.HTTPSecurity.URLAllowlist = append(c.HTTPSecurity.URLAllowlist, p)
				}
			case "block_private_ips":
				c.HTTPSecurity.BlockPrivateIPs, err = boolValue(v, "iii-http-functions security.block_private_ips")
			case "require_https":
				c.HTTPSecurity.RequireHTTPS, err = boolValue(v, "iii-http-functions security.require_https")
			}
			return err
		})
	})
}

// parseHTTPSecrets reads iii-http-functions secrets: {NAME: {env: VAR, hosts: [patterns]}}; env
// defaults to NAME, hosts is required and not empty.
func (c *Config) parseHTTPSecrets(v *yaml.Node) error {
	if v.Kind != yaml.MappingNode {
		return invalid(v.Line, "iii-http-functions secrets must be a mapping of NAME: {env: VARIABLE, hosts: [host patterns]}")
	}
	c.HTTPSecurity.Secrets = map[string]HTTPSecret{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		name := k.Value
		if name == "" || strings.ContainsAny(name, " \t\r\n") {
			return invalid(k.Line, "iii-http-functions secrets: %q is not a valid secret name", name)
		}
		if _, dup := c.HTTPSecurity.Secrets[name]; dup {
			return invalid(k.Line, "iii-http-functions secrets: %q appears twice", name)
		}
		sec := HTTPSecret{Env: name}
		what := "iii-http-functions secrets." + name
		err := mapping(val, what, []string{"env", "hosts"}, func(k, v *yaml.Node) error {
			if k.Value == "env" {
				s, err := strValue(v, what+".env")
				if err == nil && strings.TrimSpace(s) == "" {
					err = invalid(v.Line, "%s.env must name an environment variable", what)
				}
				sec.Env = s
				return err
			}
			if v.Kind != yaml.SequenceNode {
				return invalid(v.Line, "%s.hosts must be a list of host patterns, e.g. [\"api.example.com\"]", what)
			}
			for _, e := range v.Content {
				p, err := strValue(e, what+".hosts entry")
				if err != nil {
					return err
				}
				if _, err := path.Match(p, ""); err != nil || strings.TrimSpace(p) == "" {
					return invalid(e.Line, "%s.hosts: %q is not a valid host pattern", what, p)
				}
				sec.Hosts = append(sec.Hosts, p)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(sec.Hosts) == 0 {
			return invalid(k.Line, "%s needs hosts: the URL host patterns it may be sent to, e.g. [\"api.example.com\"]", what)
		}
		c.HTTPSecurity.Secrets[name] = sec
	}
	return nil
}

func boolValue(v *yaml.Node, key string) (bool, error) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!bool" {
		return strconv.ParseBool(v.Value)
	}
	if v.Kind == yaml.ScalarNode && (v.Value == "true" || v.Value == "false") { // from ${VAR}
		return v.Value == "true", nil
	}
	return false, invalid(v.Line, "%s must be true or false", key)
}

// adapterSettings are sandbox-libkrun's own keys; 0.25 read them from the engine config, 0.26
// from the adapter container's config_override (req C1).
var adapterSettings = map[string]bool{
	"auto_install": true, "image_allowlist": true, "custom_images": true, "default_idle_timeout_secs": true,
	"max_concurrent_sandboxes": true, "max_concurrent_exec_per_sandbox": true, "max_exec_timeout_ms": true,
	"default_cpus": true, "default_memory_mb": true, "per_image_caps": true, "warm_pool": true,
}

func parseSandbox(v *yaml.Node) (*Sandbox, error) {
	s := &Sandbox{Adapter: DefaultSandboxAdapter, Namespace: DefaultSandboxNamespace}
	if v.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(v.Content); i += 2 {
			if k := v.Content[i]; adapterSettings[k.Value] {
				return nil, invalid(k.Line, "%q is a setting of the sandbox adapter, not of the engine: put it under "+
					"config_override of the sandbox-libkrun container in worker-compose.yaml; sandbox: holds only adapter and namespace", k.Value)
			}
		}
	}
	err := mapping(v, "sandbox", []string{"adapter", "namespace"}, func(k, v *yaml.Node) error {
		val, err := strValue(v, k.Value)
		if err != nil {
			return err
		}
		if strings.TrimSpace(val) == "" {
			return invalid(v.Line, "sandbox.%s must not be empty", k.Value)
		}
		if k.Value == "adapter" {
			s.Adapter = val
		} else {
			s.Namespace = val
		}
		return nil
	})
	return s, err
}

// parseCluster reads cluster: {key_file, insecure, nats: {url, creds_file, nkey_file,
// tls_cert_file, tls_key_file, tls_ca_file}}. A NATS link without credentials is refused
// unless insecure is true: the engines trust what arrives on it.
func parseCluster(v *yaml.Node, baseDir string) (*Cluster, error) {
	c := &Cluster{}
	abs := func(p string) string {
		if p != "" && !filepath.IsAbs(p) {
			return filepath.Join(baseDir, p)
		}
		return p
	}
	err := mapping(v, "cluster", []string{"nats", "key_file", "insecure"}, func(k, n *yaml.Node) error {
		switch k.Value {
		case "key_file":
			val, err := strValue(n, "cluster.key_file")
			c.KeyFile = abs(val)
			return err
		case "insecure":
			var err error
			c.Insecure, err = boolValue(n, "cluster.insecure")
			return err
		}
		return mapping(n, "cluster.nats", []string{"url", "creds_file", "nkey_file", "tls_cert_file", "tls_key_file", "tls_ca_file"}, func(k, v *yaml.Node) error {
			val, err := strValue(v, "cluster.nats."+k.Value)
			if err != nil {
				return err
			}
			if k.Value == "url" {
				for _, u := range strings.Split(val, ",") {
					if u = strings.TrimSpace(u); !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
						return invalid(v.Line, "cluster.nats.url: %q is not a nats:// or tls:// URL (several are comma-separated)", u)
					}
				}
				c.URL = val
				return nil
			}
			*map[string]*string{"creds_file": &c.CredsFile, "nkey_file": &c.NkeyFile, "tls_cert_file": &c.TLSCertFile,
				"tls_key_file": &c.TLSKeyFile, "tls_ca_file": &c.TLSCAFile}[k.Value] = abs(val)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	switch {
	case c.URL == "":
		return nil, invalid(v.Line, "cluster.nats.url is required: the NATS servers the engines share")
	case c.KeyFile == "":
		return nil, invalid(v.Line, "cluster.key_file is required: the file (mode 0600) holding the key the engines of the cluster share, so that they admit only each other")
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return nil, invalid(v.Line, "cluster.nats: tls_cert_file and tls_key_file go together (the engine's TLS client certificate and its key)")
	case c.CredsFile == "" && c.NkeyFile == "" && c.TLSCertFile == "" && !c.Insecure:
		return nil, invalid(v.Line, "cluster.nats.url is given without credentials (creds_file, nkey_file, or tls_cert_file and tls_key_file); set cluster.insecure: true to join an unauthenticated NATS on purpose")
	}
	return c, nil
}

func parseNamespaces(v *yaml.Node, baseDir string) ([]Namespace, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, invalid(v.Line, "namespaces must be a list of {name, token_file, owner_token_file}")
	}
	var out []Namespace
	seen := map[string]bool{}
	for _, e := range v.Content {
		var n Namespace
		err := mapping(e, "namespaces entry", []string{"name", "token_file", "owner_token_file"}, func(k, v *yaml.Node) error {
			var err error
			switch k.Value {
			case "name":
				n.Name, err = strValue(v, k.Value)
			case "token_file":
				n.TokenFile, err = strValue(v, k.Value)
			case "owner_token_file":
				n.OwnerTokenFile, err = strValue(v, k.Value)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if n.Name == "" || n.TokenFile == "" {
			return nil, invalid(e.Line, "a namespaces entry needs name and token_file")
		}
		if n.Name == DefaultSandboxNamespace {
			return nil, invalid(e.Line, "the default namespace cannot be token-protected")
		}
		if seen[n.Name] {
			return nil, invalid(e.Line, "namespace %q listed twice", n.Name)
		}
		seen[n.Name] = true
		if !filepath.IsAbs(n.TokenFile) {
			n.TokenFile = filepath.Join(baseDir, n.TokenFile)
		}
		if n.OwnerTokenFile != "" && !filepath.IsAbs(n.OwnerTokenFile) {
			n.OwnerTokenFile = filepath.Join(baseDir, n.OwnerTokenFile)
		}
		for _, f := range []string{n.TokenFile, n.OwnerTokenFile} {
			if err := checkTokenFile(n.Name, f); err != nil {
				return nil, invalid(e.Line, "%w", err)
			}
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// checkTokenFile requires a token file (when named) to be a regular file only its owner reads.
func checkTokenFile(ns, file string) error {
	if file == "" {
		return nil
	}
	st, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("token file %s of namespace %q: %w", file, ns, errors.Unwrap(err))
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("token file %s of namespace %q is not a regular file", file, ns)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("token file %s of namespace %q must have mode 0600, has %#o", file, ns, st.Mode().Perm())
	}
	return nil
}

// originList reads allowed_origins: a list of origin patterns (see core.Options.AllowedOrigins).
func originList(v *yaml.Node) ([]string, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, invalid(v.Line, "allowed_origins must be a list of origins, e.g. [\"http://localhost:3000\"]")
	}
	var out []string
	for _, e := range v.Content {
		p, err := strValue(e, "allowed_origins entry")
		if err != nil {
			return nil, err
		}
		if err := validOrigin(p); err != nil {
			return nil, invalid(e.Line, "allowed_origins: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// streamOrigins reads iii-stream's allowed_origins: origin patterns as the listeners', where
// "*" alone is allowed: it gives back iii's stream port, open to every page.
func streamOrigins(v *yaml.Node) ([]string, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, invalid(v.Line, "iii-stream config: allowed_origins must be a list of origins, e.g. [\"http://app.example\"]")
	}
	var out []string
	for _, e := range v.Content {
		p, err := strValue(e, "allowed_origins entry")
		if err != nil {
			return nil, err
		}
		if p != "*" {
			if err := validOrigin(p); err != nil {
				return nil, invalid(e.Line, "iii-stream config: allowed_origins: %w", err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// validOrigin checks one allowed_origins pattern (path.Match syntax; "*" alone is refused).
func validOrigin(p string) error {
	if strings.TrimSpace(p) == "" {
		return errors.New("an origin must not be empty")
	}
	if p == "*" || p == "*://*" {
		return fmt.Errorf("%q would let every web page drive the engine; name the origins", p)
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("%q is not a valid pattern: %w", p, err)
	}
	return nil
}

func strValue(v *yaml.Node, key string) (string, error) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return "", invalid(v.Line, "%s must be a string", key)
	}
	return v.Value, nil
}

func intValue(v *yaml.Node, key string) (int, error) {
	if v.Kind != yaml.ScalarNode {
		return 0, invalid(v.Line, "%s must be an integer", key)
	}
	n, err := strconv.Atoi(v.Value)
	if err != nil {
		return 0, invalid(v.Line, "%s must be an integer, got %q", key, v.Value)
	}
	return n, nil
}
