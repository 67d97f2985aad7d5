package doctor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/iii-go/iii/compose/sandboxadapter"
	"github.com/iii-go/iii/engine/config"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// sandboxEntryID is the configuration id 0.25 users may have stored sandbox settings under.
const sandboxEntryID = "iii-sandbox"

// engineURL is where the project's engine answers: the compose file's engine.url when Compose
// owns the engine, else config.yaml's listener, else $III_URL, else the default address.
func engineURL(o Options, p *projectInfo, cfg *config.Config) string {
	if p != nil && p.f != nil && p.f.Engine != nil {
		return p.f.Engine.URL
	}
	if cfg != nil {
		main := cfg.Main()
		host := main.Host
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = config.DefaultHost
		}
		return "ws://" + net.JoinHostPort(host, strconv.Itoa(main.Port))
	}
	if u := o.getenv(protocol.EnvURL); u != "" {
		return u
	}
	return protocol.DefaultURL
}

// checkEngine reaches the engine, when one answers within o.EngineTimeout, and reads the
// template form of the iii-sandbox configuration entry: an entry exists only when someone added it
// by hand, it never applied on 0.25, and Compose does not move it (req C3, C4, C5).
func checkEngine(ctx context.Context, r *Report, o Options, p *projectInfo, cfg *config.Config) {
	url := engineURL(o, p, cfg)
	r.EngineURL = url
	dctx, cancel := context.WithTimeout(ctx, o.EngineTimeout)
	defer cancel()
	w, err := protocol.Connect(dctx, protocol.Config{URL: url, Name: "iii-doctor", Namespace: protocol.DefaultNamespace, NoReconnect: true}.FromEnv(o.getenv))
	if err != nil {
		r.note(fmt.Sprintf("no engine answered at %s, so the stored %s configuration entry was not checked; start the engine and run iii doctor again to check it", url, sandboxEntryID))
		return
	}
	defer w.Close()
	r.EngineReached = true
	cctx, ccancel := context.WithTimeout(ctx, 2*o.EngineTimeout)
	defer ccancel()
	res, err := w.Call(cctx, "configuration::get", map[string]any{"id": sandboxEntryID, "raw": true})
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe) && pe.Code == errcode.NotFound:
		r.note(fmt.Sprintf("the engine at %s stores no %s configuration entry: nothing to move", url, sandboxEntryID))
	case err != nil:
		r.note(fmt.Sprintf("the engine at %s answered, but configuration::get id=%s raw=true failed: %v", url, sandboxEntryID, err))
	default:
		ns := protocol.DefaultNamespace
		if p != nil && p.f != nil {
			ns = p.adapter.Namespace
		}
		r.add(Finding{Code: StoredSandboxEntry, Severity: Info, Path: "configuration:" + sandboxEntryID,
			Message: fmt.Sprintf("the engine at %s stores a configuration entry under %s: %s. Someone added it by hand; it never applied on 0.25 (the sandbox daemon read only its own config file), and Compose does not move it", url, sandboxEntryID, compact(res)),
			Fix: fmt.Sprintf("review it before you copy any key into containers.%s.config_override: there, values such as image_allowlist take effect for the first time. Do not store those keys under the adapter's id, %s-%s: Compose sets that entry in memory each time it starts the adapter. Check the adapter before you delete the old entry",
				sandboxadapter.Name, ns, sandboxadapter.Name)})
	}
}

// compact shortens a JSON reply for a one-line message.
func compact(b []byte) string {
	const max = 300
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
