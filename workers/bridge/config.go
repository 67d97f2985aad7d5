package bridge

import (
	"fmt"
	"net/url"
	"os"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/wconfig"
)

// DefaultTimeoutMS bounds a forwarded call whose entry names no timeout_ms, as iii's.
const DefaultTimeoutMS = 30000

// Config is the bridge's configuration: iii's keys (url, service_id, service_name, expose,
// forward) and this project's token_file and namespace for the remote engine.
type Config struct {
	// URL is the remote engine's WebSocket address. Required: the local engine is $III_URL.
	URL         string `yaml:"url"`
	ServiceID   string `yaml:"service_id"`
	ServiceName string `yaml:"service_name"` // default ServiceID
	// TokenFile holds the remote engine's token (mode 0600), presented to it alone; without one
	// the bridge connects to the remote with no token.
	TokenFile string `yaml:"token_file"`
	// Namespace is where exposed functions register on the remote engine; default "default".
	Namespace string    `yaml:"namespace"`
	Expose    []Expose  `yaml:"expose"`
	Forward   []Forward `yaml:"forward"`
}

// Expose makes the local function LocalFunction callable on the remote engine as
// RemoteFunction (default LocalFunction).
type Expose struct {
	LocalFunction  string `yaml:"local_function"`
	RemoteFunction string `yaml:"remote_function"`
}

// Forward registers LocalFunction on the local engine; a call of it is a call of
// RemoteFunction on the remote engine, bounded by TimeoutMS (default DefaultTimeoutMS).
type Forward struct {
	LocalFunction  string `yaml:"local_function"`
	RemoteFunction string `yaml:"remote_function"`
	TimeoutMS      int64  `yaml:"timeout_ms"`
}

// Default is the configuration before the file is read.
func Default() Config {
	return Config{ServiceID: "bridge-client", Namespace: protocol.DefaultNamespace}
}

// Local functions the bridge always serves.
const (
	FnInvoke      = "bridge.invoke"
	FnInvokeAsync = "bridge.invoke_async"
	FnStatus      = "bridge::status"
)

// Check completes c and refuses what cannot work, with CONFIG_INVALID naming the key.
func (c *Config) Check() error {
	if c.URL == "" {
		return errcode.New(errcode.ConfigInvalid, "bridge url is required: the remote engine's ws:// or wss:// address (the local engine is $III_URL)")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return errcode.New(errcode.ConfigInvalid, "bridge url %q must be a ws:// or wss:// URL of the remote engine", wconfig.RedactURL(c.URL))
	}
	if u.User != nil {
		return errcode.New(errcode.ConfigInvalid, "bridge url %q carries credentials; put the remote engine's token in token_file instead", wconfig.RedactURL(c.URL))
	}
	if c.ServiceName == "" {
		c.ServiceName = c.ServiceID
	}
	if c.Namespace == "" {
		c.Namespace = protocol.DefaultNamespace
	}
	if c.TokenFile != "" {
		fi, err := os.Stat(c.TokenFile)
		switch {
		case err != nil:
			return errcode.New(errcode.ConfigInvalid, "bridge token_file: %w", err)
		case !fi.Mode().IsRegular():
			return errcode.New(errcode.ConfigInvalid, "bridge token_file %s is not a regular file", c.TokenFile)
		case fi.Mode().Perm()&0o077 != 0:
			return errcode.New(errcode.ConfigInvalid, "bridge token_file %s is readable by others (mode %04o); chmod 600 it", c.TokenFile, fi.Mode().Perm())
		}
	}
	local := map[string]string{FnInvoke: "the bridge", FnInvokeAsync: "the bridge", FnStatus: "the bridge"}
	for i := range c.Forward {
		f := &c.Forward[i]
		key := fmt.Sprintf("bridge forward[%d]", i)
		switch {
		case f.LocalFunction == "" || f.RemoteFunction == "":
			return errcode.New(errcode.ConfigInvalid, "%s needs local_function and remote_function", key)
		case f.TimeoutMS < 0:
			return errcode.New(errcode.ConfigInvalid, "%s timeout_ms must not be negative, got %d", key, f.TimeoutMS)
		case local[f.LocalFunction] != "":
			return errcode.New(errcode.ConfigInvalid, "%s local_function %s is already served by %s", key, f.LocalFunction, local[f.LocalFunction])
		}
		if f.TimeoutMS == 0 {
			f.TimeoutMS = DefaultTimeoutMS
		}
		local[f.LocalFunction] = key
	}
	remote := map[string]string{}
	for i := range c.Expose {
		x := &c.Expose[i]
		key := fmt.Sprintf("bridge expose[%d]", i)
		if x.LocalFunction == "" {
			return errcode.New(errcode.ConfigInvalid, "%s needs local_function", key)
		}
		if x.RemoteFunction == "" {
			x.RemoteFunction = x.LocalFunction
		}
		if remote[x.RemoteFunction] != "" {
			return errcode.New(errcode.ConfigInvalid, "%s remote_function %s is already exposed by %s", key, x.RemoteFunction, remote[x.RemoteFunction])
		}
		remote[x.RemoteFunction] = key
	}
	return nil
}
