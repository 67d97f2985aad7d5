package cli

import (
	"log/slog"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/discovery"
	"github.com/iii-go/iii/engine/protocol"
)

// observer is the engine's core.Observer: discovery's part and observability's.
type observer struct {
	*discovery.Discovery
}

func (observer) StartCall(core.Call) (string, func(*protocol.Error)) { return "", nil }
func (observer) Telemetry(string, string, []byte)                   {}

// installObservers adds discovery (and observability) to eng.
func installObservers(eng *core.Engine, log *slog.Logger) {
	eng.SetObserver(observer{discovery.Install(eng, nil, log)})
}
