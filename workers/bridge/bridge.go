// Package bridge is iii's iii-bridge as a worker: one connection to the local engine (the
// worker's own) and one to a remote engine. Each forward entry registers a local function whose
// calls run a remote function; each expose entry registers, on the remote engine, a function
// whose calls run a local one; bridge.invoke and bridge.invoke_async call any remote function.
// State and streams of another engine are reached by forwarding their functions (state::get,
// stream::set, ...), as iii's sample configuration does.
//
// The remote connection reconnects on its own with the SDK's jittered backoff and registers the
// exposed functions again. A call in flight when a link drops fails NOT_CONNECTED naming the
// link; a call made while the remote is away waits for it at most the call's timeout.
package bridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/wconfig"
)

// Bridge joins a local and a remote engine.
type Bridge struct {
	cfg           Config
	local, remote *protocol.Worker
	log           *slog.Logger

	forwarded, exposed, failed atomic.Int64
	stop                       context.CancelFunc
	done                       chan struct{}
}

// New registers cfg's functions: forwards and bridge.* on local, exposes on remote. remote must
// be a worker configured for the remote engine alone (its URL, namespace and token), never with
// the local engine's token. Call Start once local is up.
func New(cfg Config, local, remote *protocol.Worker, log *slog.Logger) (*Bridge, error) {
	b := &Bridge{cfg: cfg, local: local, remote: remote, log: log, done: make(chan struct{})}
	for _, f := range cfg.Forward {
		timeout := time.Duration(f.TimeoutMS) * time.Millisecond
		if err := local.Register(f.LocalFunction, func(ctx context.Context, in json.RawMessage) (any, error) {
			return b.callRemote(ctx, f.RemoteFunction, in, timeout)
		}, protocol.WithDescription("forwarded by the bridge to "+f.RemoteFunction+" on "+wconfig.RedactURL(cfg.URL))); err != nil {
			return nil, err
		}
	}
	for _, x := range cfg.Expose {
		if err := remote.Register(x.RemoteFunction, func(ctx context.Context, in json.RawMessage) (any, error) {
			b.exposed.Add(1)
			out, err := local.Call(ctx, x.LocalFunction, in)
			if err != nil {
				b.failed.Add(1)
				return nil, linkError(err, "the local engine", x.LocalFunction)
			}
			return out, nil
		}, protocol.WithDescription("exposed by the bridge "+cfg.ServiceID+" from "+x.LocalFunction)); err != nil {
			return nil, err
		}
	}
	reg := []struct {
		id, desc string
		h        protocol.Handler
	}{
		{FnInvoke, "Call a function of the remote engine and wait: {function_id, data, timeout_ms?}", b.invoke},
		{FnInvokeAsync, "Call a function of the remote engine without waiting: {function_id, data}", b.invokeAsync},
		{FnStatus, "The bridge's remote engine (credentials redacted), whether it is connected, and its call counts", b.status},
	}
	for _, r := range reg {
		if err := local.Register(r.id, r.h, protocol.WithDescription(r.desc)); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Start connects to the remote engine in the background, retrying until Close; the local
// functions answer NOT_CONNECTED (after their timeout) while it is away.
func (b *Bridge) Start(ctx context.Context) {
	ctx, b.stop = context.WithCancel(ctx)
	go func() {
		defer close(b.done)
		if err := b.remote.Start(ctx); err != nil {
			if ctx.Err() == nil {
				b.log.Error("bridge: the remote engine refused the connection", "url", wconfig.RedactURL(b.cfg.URL), "err", err)
			}
			return
		}
		b.log.Info("bridge: connected to the remote engine", "url", wconfig.RedactURL(b.cfg.URL), "namespace", b.cfg.Namespace,
			"exposed", len(b.cfg.Expose), "forwarded", len(b.cfg.Forward))
	}()
}

// Close disconnects from the remote engine.
func (b *Bridge) Close() {
	if b.stop != nil {
		b.stop()
		<-b.done
	}
	_ = b.remote.Close()
}

func (b *Bridge) callRemote(ctx context.Context, fn string, in json.RawMessage, timeout time.Duration) (any, error) {
	b.forwarded.Add(1)
	if len(in) == 0 {
		in = json.RawMessage("null")
	}
	out, err := b.remote.Call(ctx, fn, in, protocol.WithTimeout(timeout))
	if err != nil {
		b.failed.Add(1)
		return nil, linkError(err, "the remote engine "+wconfig.RedactURL(b.cfg.URL), fn)
	}
	return out, nil
}

// linkError names the link in a NOT_CONNECTED error; any other error (the function's own)
// passes as it is.
func linkError(err error, link, fn string) error {
	if pe := protocol.AsError(err); pe != nil && pe.Code == errcode.NotConnected {
		return protocol.NewError(errcode.NotConnected, "bridge: %s is not connected, so %s was not answered: %s", link, fn, pe.Message)
	}
	return err
}

type invokeRequest struct {
	FunctionID string          `json:"function_id"`
	Data       json.RawMessage `json:"data"`
	TimeoutMS  int64           `json:"timeout_ms"`
}

func readInvoke(fn string, in json.RawMessage) (invokeRequest, error) {
	var r invokeRequest
	if err := json.Unmarshal(in, &r); err != nil || r.FunctionID == "" || r.TimeoutMS < 0 {
		return r, protocol.NewError(errcode.InvalidArguments, "%s takes {function_id, data, timeout_ms?}", fn)
	}
	return r, nil
}

func (b *Bridge) invoke(ctx context.Context, in json.RawMessage) (any, error) {
	r, err := readInvoke(FnInvoke, in)
	if err != nil {
		return nil, err
	}
	timeout := time.Duration(DefaultTimeoutMS) * time.Millisecond
	if r.TimeoutMS > 0 {
		timeout = time.Duration(r.TimeoutMS) * time.Millisecond
	}
	return b.callRemote(ctx, r.FunctionID, r.Data, timeout)
}

func (b *Bridge) invokeAsync(ctx context.Context, in json.RawMessage) (any, error) {
	r, err := readInvoke(FnInvokeAsync, in)
	if err != nil {
		return nil, err
	}
	if len(r.Data) == 0 {
		r.Data = json.RawMessage("null")
	}
	b.forwarded.Add(1)
	if err := b.remote.CallVoid(ctx, r.FunctionID, r.Data); err != nil {
		b.failed.Add(1)
		return nil, linkError(err, "the remote engine "+wconfig.RedactURL(b.cfg.URL), r.FunctionID)
	}
	return nil, nil
}

// probeTimeout bounds bridge::status's check that the remote engine answers.
const probeTimeout = time.Second

func (b *Bridge) status(ctx context.Context, _ json.RawMessage) (any, error) {
	_, probe := b.remote.Call(ctx, "engine::functions::list", map[string]string{"namespace": b.cfg.Namespace}, protocol.WithTimeout(probeTimeout))
	forward := make([]map[string]string, 0, len(b.cfg.Forward))
	for _, f := range b.cfg.Forward {
		forward = append(forward, map[string]string{"local_function": f.LocalFunction, "remote_function": f.RemoteFunction})
	}
	expose := make([]map[string]string, 0, len(b.cfg.Expose))
	for _, x := range b.cfg.Expose {
		expose = append(expose, map[string]string{"local_function": x.LocalFunction, "remote_function": x.RemoteFunction})
	}
	return map[string]any{"url": wconfig.RedactURL(b.cfg.URL), "service_id": b.cfg.ServiceID, "namespace": b.cfg.Namespace,
		"connected": probe == nil, "forward": forward, "expose": expose,
		"calls": map[string]int64{"forwarded": b.forwarded.Load(), "exposed": b.exposed.Load(), "failed": b.failed.Load()}}, nil
}
