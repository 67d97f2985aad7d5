package rbacproxy

import (
	"fmt"
	"net/url"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/engine/config"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/wconfig"
)

// Defaults of the configuration. The host is the loopback address, as the other workers' (iii's
// proxy binds 0.0.0.0): a proxy facing a network says so with host: 0.0.0.0.
const (
	DefaultHost        = "127.0.0.1"
	DefaultPort        = 49200
	DefaultHandshakeMS = 10000
)

// Config is the proxy's configuration (iii's rbac-proxy keys): where it listens, the trusted
// engine listener it forwards to, and the gate, an rbac: block with the keys of an engine
// listener's.
type Config struct {
	Host      string `yaml:"host"`
	Port      int    `yaml:"port"`
	EngineURL string `yaml:"engine_url"` // default $III_URL, else the engine's default address
	// MiddlewareFunctionID, when set, is called with rbac.MiddlewareInput instead of every
	// allowed function outside engine:: that a session invokes; its answer is the call's.
	MiddlewareFunctionID string `yaml:"middleware_function_id"`
	// HandshakeTimeoutMS bounds the auth function's and the hooks' calls, and the dial to the
	// engine.
	HandshakeTimeoutMS int   `yaml:"handshake_timeout_ms"`
	RBAC               Block `yaml:"rbac"`
}

// Block is the rbac: block, read by the engine's own parser (config.ParseRBAC). Absent or
// empty, it admits every connection and exposes only the infrastructure functions.
type Block struct{ *rbac.Config }

// UnmarshalYAML reads the block as an engine listener's, refusing unknown keys.
func (b *Block) UnmarshalYAML(n *yaml.Node) error {
	c, err := config.ParseRBAC(n, "rbac-proxy rbac")
	if err != nil {
		return err
	}
	b.Config = c
	return nil
}

// Default is the configuration before the file is read.
func Default() Config {
	return Config{Host: DefaultHost, Port: DefaultPort, HandshakeTimeoutMS: DefaultHandshakeMS}
}

// Check completes c (the engine URL's default: envURL, $III_URL, else protocol.DefaultURL; an
// empty rbac: block) and refuses what cannot work, with CONFIG_INVALID naming the key.
func (c *Config) Check(envURL string) error {
	if c.EngineURL == "" {
		c.EngineURL = envURL
	}
	if c.EngineURL == "" {
		c.EngineURL = protocol.DefaultURL
	}
	if c.RBAC.Config == nil {
		c.RBAC.Config = &rbac.Config{}
	}
	if c.Host == "" {
		return errcode.New(errcode.ConfigInvalid, "rbac-proxy host must not be empty")
	}
	if c.Port < 0 || c.Port > 65535 {
		return errcode.New(errcode.ConfigInvalid, "rbac-proxy port %d is out of range 0-65535", c.Port)
	}
	if c.HandshakeTimeoutMS <= 0 {
		return errcode.New(errcode.ConfigInvalid, "rbac-proxy handshake_timeout_ms must be positive, got %d", c.HandshakeTimeoutMS)
	}
	u, err := url.Parse(c.EngineURL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return errcode.New(errcode.ConfigInvalid, "rbac-proxy engine_url %q must be a ws:// or wss:// URL of the engine's trusted listener", wconfig.RedactURL(c.EngineURL))
	}
	return nil
}

func (c Config) String() string {
	return fmt.Sprintf("host=%s port=%d engine_url=%s middleware=%q auth=%q", c.Host, c.Port, wconfig.RedactURL(c.EngineURL), c.MiddlewareFunctionID, c.authID())
}

func (c Config) authID() string {
	if c.RBAC.Config == nil {
		return ""
	}
	return c.RBAC.AuthFunctionID
}
