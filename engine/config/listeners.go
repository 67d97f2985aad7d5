package config

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/engine/rbac"
)

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
