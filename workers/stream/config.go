package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/engine/config"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/jsstore"
)

// Defaults of Config.
const (
	DefaultHost = "127.0.0.1"
	DefaultPort = 3112
)

// Config is the stream worker's configuration: iii's iii-stream keys (port, host, auth_function, adapter)
// plus the store's (nats, replicas) and the bounds of the WebSocket port (allowed_origins,
// join_timeout_ms, idle_timeout_ms, max_connections, max_connections_per_address).
type Config struct {
	// Host and Port of the WebSocket endpoint. iii listens on 0.0.0.0 by default; this worker
	// on 127.0.0.1, as the engine does, so a stream is not open to the network unless asked.
	Host string `yaml:"host"`
	Port Port   `yaml:"port"`
	// AuthFunction is called for each new WebSocket connection (see Hub).
	AuthFunction string `yaml:"auth_function"`
	// Adapter is iii's adapter: {name: kv, config: {store_method, file_path}}. kv is the only
	// one; redis and bridge are refused (use nats.url to share the store instead).
	Adapter *Adapter `yaml:"adapter"`
	// NATS is the store (see package jsstore): embedded by default, a cluster with nats.url.
	NATS     jsstore.Config `yaml:"nats"`
	Replicas int            `yaml:"replicas"`
	// AllowedOrigins are the browser origins admitted besides the port's own and loopback pages
	// (see Limits); ["*"] admits all, as iii's port does.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// JoinTimeoutMS, IdleTimeoutMS, MaxConnections and MaxConnectionsPerAddress are Limits'
	// (0: the default).
	JoinTimeoutMS            int `yaml:"join_timeout_ms"`
	IdleTimeoutMS            int `yaml:"idle_timeout_ms"`
	MaxConnections           int `yaml:"max_connections"`
	MaxConnectionsPerAddress int `yaml:"max_connections_per_address"`
	// LookupEnv is the worker's environment (os.LookupEnv in its main; the engine's for
	// iii-stream in the engine's process): $III_COMPOSE_DIR, the base of a relative file_path
	// under Compose. nil is an empty one.
	LookupEnv func(string) (string, bool) `yaml:"-"`
}

// Limits are the stream port's limits c sets.
func (c Config) Limits() Limits {
	return Limits{AllowedOrigins: c.AllowedOrigins, JoinTimeout: time.Duration(c.JoinTimeoutMS) * time.Millisecond,
		IdleTimeout: time.Duration(c.IdleTimeoutMS) * time.Millisecond, MaxConnections: c.MaxConnections, MaxPerAddress: c.MaxConnectionsPerAddress}
}

// Adapter is iii's adapter entry.
type Adapter struct {
	Name   string         `yaml:"name"`
	Config map[string]any `yaml:"config"`
}

// Port is a TCP port given as a number or a string of digits (what ${STREAM_PORT:3112} gives).
type Port int

// UnmarshalYAML takes 3112 or "3112".
func (p *Port) UnmarshalYAML(n *yaml.Node) error {
	v, err := strconv.Atoi(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: port must be a number, got %q", n.Line, n.Value)
	}
	*p = Port(v)
	return nil
}

// Default is the configuration with nothing set.
func Default() Config { return Config{Host: DefaultHost, Port: DefaultPort, Replicas: 1} }

// Store is what Validate makes of the adapter: where the items live.
type Store struct {
	Memory  bool   // store_method: in_memory
	DataDir string // file_path: the embedded store's directory ("" for the default)
}

// Validate checks c and returns the store its adapter names. Errors name the key: an adapter
// iii has and this worker does not is CONFIG_UNSUPPORTED, anything else wrong CONFIG_INVALID.
func (c Config) Validate() (Store, error) {
	var st Store
	if c.Host == "" {
		return st, errcode.New(errcode.ConfigInvalid, "host must not be empty")
	}
	if c.Port < 0 || c.Port > 65535 {
		return st, errcode.New(errcode.ConfigInvalid, "port %d is out of range (0-65535)", c.Port)
	}
	if c.Replicas < 0 {
		return st, errcode.New(errcode.ConfigInvalid, "replicas is %d: it must be 1 or more (0 means 1)", c.Replicas)
	}
	for k, v := range map[string]int{"join_timeout_ms": c.JoinTimeoutMS, "idle_timeout_ms": c.IdleTimeoutMS,
		"max_connections": c.MaxConnections, "max_connections_per_address": c.MaxConnectionsPerAddress} {
		if v < 0 {
			return st, errcode.New(errcode.ConfigInvalid, "%s is %d: it must be 0 (the default) or more", k, v)
		}
	}
	for _, o := range c.AllowedOrigins {
		if _, err := path.Match(o, ""); err != nil || o == "" {
			return st, errcode.New(errcode.ConfigInvalid, "allowed_origins: %q is not a pattern (path.Match syntax: *, ?, [a-z])", o)
		}
	}
	if c.Adapter == nil {
		return st, nil
	}
	switch c.Adapter.Name {
	case "kv":
	case "redis", "bridge":
		return st, errcode.New(errcode.ConfigUnsupported, "adapter.name: %q is not supported by this stream worker: it keeps streams in JetStream "+
			"(adapter kv, the default); to share streams between workers point nats.url at one NATS cluster", c.Adapter.Name)
	case "":
		return st, errcode.New(errcode.ConfigInvalid, "adapter.name is required (kv)")
	default:
		return st, errcode.New(errcode.ConfigInvalid, "adapter.name: unknown adapter %q; use kv", c.Adapter.Name)
	}
	var kv config.KV
	for k, v := range c.Adapter.Config {
		if ok, err := kv.Set("adapter.config.", k, v); err != nil {
			return st, err
		} else if ok {
			continue
		}
		if k == "channel_size" {
			return st, errcode.New(errcode.ConfigUnsupported, "adapter.config.channel_size is not supported: this stream worker does not drop events "+
				"behind a bounded channel; remove the key")
		}
		return st, errcode.New(errcode.ConfigInvalid, "adapter.config: unknown key %q; allowed: %s", k, strings.Join(config.KVKeys, ", "))
	}
	st.Memory, st.DataDir = kv.Memory, kv.FilePath
	if st.DataDir != "" && (c.NATS.URL != "" || c.NATS.DataDir != "") {
		return st, errcode.New(errcode.ConfigInvalid, "adapter.config.file_path and nats.url/nats.data_dir both say where the streams live; keep one")
	}
	if st.DataDir != "" && !filepath.IsAbs(st.DataDir) && c.LookupEnv != nil {
		// As the other workers' file_path: the Compose file's directory under Compose, else
		// the working directory (the engine's, for iii-stream in the engine's process).
		if base, _ := c.LookupEnv(jsstore.EnvComposeDir); base != "" {
			st.DataDir = filepath.Join(base, st.DataDir)
		}
	}
	return st, nil
}

// Setup is the stream worker's set-up on w (before it connects), for wmain.Main and for an
// engine serving iii-stream in its process: it opens the store, binds the WebSocket endpoint
// (an address in use fails here, LISTEN_FAILED), and registers the functions and the trigger
// type. The returned function stops all of it.
func Setup(ctx context.Context, cfg Config, w *protocol.Worker, log *slog.Logger) (func(), error) {
	st, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	dir := st.DataDir
	if dir == "" {
		if dir, err = jsstore.DefaultDataDir("stream", w.Namespace()); err != nil {
			return nil, err
		}
	}
	store, err := jsstore.Open(ctx, cfg.NATS, dir, "iii-stream")
	if err != nil {
		return nil, err
	}
	svc, err := Open(ctx, store.JS, store.NC, w.Namespace(), Options{Replicas: cfg.Replicas, Memory: st.Memory}, w)
	if err != nil {
		store.Close()
		return nil, err
	}
	svc.Log = log.Warn
	hub, err := NewHub(svc)
	if err != nil {
		store.Close()
		return nil, err
	}
	hub.Log = log.Warn
	hub.AuthFunction = cfg.AuthFunction
	hub.Limits = cfg.Limits()
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		hub.Close()
		store.Close()
		return nil, errcode.New(errcode.ListenFailed, "iii-stream cannot listen on %s (host, port): %w", addr, err)
	}
	if t, ok := ln.Addr().(*net.TCPAddr); ok && t.IP.IsLoopback() {
		hub.Loopback = true
	}
	srv := &http.Server{Handler: hub, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("stream endpoint stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("stream endpoint listening", "url", "ws://"+ln.Addr().String())
	cleanup := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hub.Close()
		_ = srv.Shutdown(sctx)
		store.Close()
	}
	for id, h := range map[string]func(context.Context, json.RawMessage) (any, error){
		"stream::set": svc.Set, "stream::get": svc.Get, "stream::delete": svc.Delete, "stream::update": svc.Update,
		"stream::list": svc.List, "stream::list_groups": svc.ListGroups, "stream::list_all": svc.ListAll, "stream::send": svc.Send,
	} {
		if err := w.Register(id, h); err != nil {
			cleanup()
			return nil, err
		}
	}
	for _, tt := range []struct {
		name, what string
		h          protocol.TriggerHandler
	}{
		{TriggerType, "Fires on every change of a stream: {stream_name, group_id?, item_id?, condition_function_id?}", svc},
		{JoinTriggerType, "Fires when a WebSocket client joins a stream; {unauthorized: true} refuses it", JoinLeave{Svc: svc, Join: true}},
		{LeaveTriggerType, "Fires when a WebSocket client leaves a stream", JoinLeave{Svc: svc}},
	} {
		if err := w.RegisterTriggerType(tt.name, tt.what, tt.h); err != nil {
			cleanup()
			return nil, err
		}
	}
	return cleanup, nil
}
