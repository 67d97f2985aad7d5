package cli

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/iii-go/iii/engine/config"
	"github.com/iii-go/iii/engine/configworker"
	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/discovery"
	"github.com/iii-go/iii/engine/httpfn"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox"
	"github.com/iii-go/iii/engine/telemetry"
	"github.com/iii-go/iii/internal/base/errcode"
)

// observer is the engine's core.Observer: discovery's part and observability's.
type observer struct {
	d *discovery.Discovery
	o *telemetry.Worker
}

func (x observer) StartCall(c core.Call) (string, func(*protocol.Error)) { return x.o.StartCall(c) }
func (x observer) Telemetry(id, signal string, body []byte)              { x.o.Telemetry(id, signal, body) }
func (x observer) FunctionsChanged()                                     { x.d.FunctionsChanged() }
func (x observer) WorkerRegistered(id string) {
	x.d.WorkerRegistered(id)
	x.o.WorkerRegistered(id)
}

// installObservers adds discovery and the iii-observability worker (configured by the
// configuration entry iii-observability of store, read once at start as iii does) to eng and
// starts the worker's exporters; logs (the engine's handler) feeds it the engine's own log lines.
func installObservers(ctx context.Context, eng *core.Engine, store *configworker.Worker, version string, logs *telemetry.Handler, log *slog.Logger,
	ln net.Listener, comps []telemetry.Component) (*telemetry.Worker, error) {
	cfg, err := observabilityConfig(store, version, log)
	if err != nil {
		return nil, err
	}
	w := telemetry.New(cfg, version, log)
	w.Install(eng)
	started := time.Now()
	w.AddComponent(telemetry.Component{Name: "engine", Check: func() (string, any) {
		return "healthy", map[string]any{"version": version, "uptime_seconds": int(time.Since(started).Seconds()),
			"workers": len(eng.Workers()), "functions": len(eng.Functions()), "pending_invocations": eng.PendingCount(), "channels": eng.ChannelCount()}
	}})
	w.AddComponent(telemetry.Component{Name: "listener", Check: func() (string, any) {
		return "healthy", map[string]any{"address": "ws://" + ln.Addr().String(), "connections": len(eng.Workers())}
	}})
	for _, c := range comps {
		w.AddComponent(c)
	}
	eng.SetObserver(observer{d: discovery.Install(eng, w, log), o: w})
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	logs.Attach(w)
	return w, nil
}

// observabilityConfig is iii-observability's configuration: iii's defaults, under the
// configuration entry of that id when there is one. The entry comes from the store directly,
// never through configuration::get: only a value the owner wrote (a file in the configuration
// directory, the owner's register or set, a publish) counts. One stored for anyone else (possible
// only before engine-consumed entries were the owner's) is logged and left out, so it neither
// stops the engine from starting nor changes where telemetry goes.
func observabilityConfig(store *configworker.Worker, version string, log *slog.Logger) (telemetry.Config, error) {
	cfg := telemetry.DefaultConfig(version)
	value, err := store.Own(telemetry.Name)
	if err != nil {
		var perr *protocol.Error
		if errors.As(err, &perr) && perr.Code == errcode.Forbidden {
			log.Warn("configuration entry not used; iii-observability runs with its defaults", "id", telemetry.Name, "code", perr.Code, "reason", perr.Message)
			return cfg, nil
		}
		return cfg, errcode.New(errcode.ConfigInvalid, "reading the configuration entry %s: %w", telemetry.Name, err)
	}
	if value == nil {
		return cfg, nil
	}
	var m map[string]any
	if err := json.Unmarshal(value, &m); err != nil {
		return cfg, errcode.New(errcode.ConfigInvalid, "the configuration entry %s must hold an object of iii-observability's keys: %w", telemetry.Name, err)
	}
	return telemetry.ParseConfig(cfg, m)
}

// builtinComponents are the built-in workers engine::health::check reports on.
func builtinComponents(cfg *config.Config, bind *sandbox.Binding) []telemetry.Component {
	ok := func(name string, details any) telemetry.Component {
		return telemetry.Component{Name: name, Check: func() (string, any) { return "healthy", details }}
	}
	router := map[string]any{"bound": bind != nil}
	if bind != nil {
		router["adapter"], router["namespace"] = bind.Adapter, bind.Namespace
	}
	return []telemetry.Component{
		ok(discovery.WorkerName, map[string]any{"functions": "engine::*"}),
		ok("configuration", map[string]any{"adapter": "fs", "directory": cfg.ConfigDir}),
		ok("iii-http-functions", map[string]any{"require_https": cfg.HTTPSecurity.RequireHTTPS, "block_private_ips": cfg.HTTPSecurity.BlockPrivateIPs}),
		ok("iii-sandbox", router),
	}
}

// httpSecurity is iii-http-functions' security and secrets as config.yaml sets them.
func httpSecurity(c config.HTTPSecurity) httpfn.Security {
	sec := httpfn.Security{URLAllowlist: c.URLAllowlist, BlockPrivateIPs: c.BlockPrivateIPs, RequireHTTPS: c.RequireHTTPS}
	if len(c.Secrets) > 0 {
		sec.Secrets = make(map[string]httpfn.Secret, len(c.Secrets))
		for name, s := range c.Secrets {
			sec.Secrets[name] = httpfn.Secret{Env: s.Env, Hosts: s.Hosts}
		}
	}
	return sec
}
