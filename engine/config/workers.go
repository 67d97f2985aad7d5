package config

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

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
