package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/internal/wire"
	"github.com/iii-go/iii/internal/base/errcode"
)

// DefaultCallTimeout bounds a Call whose context has no deadline.
const DefaultCallTimeout = 30 * time.Second

// CallOption changes one call.
type CallOption func(*callOpts)

type callOpts struct {
	ns      *string
	timeout time.Duration
	meta    json.RawMessage
	action  *Action
}

// Enqueue asks the engine to hand the call to the queue worker for queue instead of running it
// now: the reply is {messageReceiptId} once the message is stored (action enqueue).
func Enqueue(queue string) CallOption {
	return func(o *callOpts) { o.action = &Action{Type: "enqueue", Queue: queue} }
}

// WithMetadata sends meta (a JSON object) as the invocation's metadata sidecar; trigger
// providers pass the trigger's metadata this way.
func WithMetadata(meta json.RawMessage) CallOption { return func(o *callOpts) { o.meta = meta } }

// InNamespace sends the call to ns instead of the default choice.
func InNamespace(ns string) CallOption { return func(o *callOpts) { o.ns = &ns } }

// WithTimeout bounds the call (default: the context deadline, else DefaultCallTimeout).
func WithTimeout(d time.Duration) CallOption { return func(o *callOpts) { o.timeout = d } }

// IsEngineFunction reports whether id belongs to the engine (engine::*, configuration::*,
// sandbox::*); such calls go to the default namespace.
func IsEngineFunction(id string) bool {
	return strings.HasPrefix(id, "engine::") || strings.HasPrefix(id, "configuration::") || strings.HasPrefix(id, "sandbox::")
}

func (w *Worker) resolve(fn string, opts []CallOption) callOpts {
	var o callOpts
	if len(opts) > 0 {
		o = applyCallOptions(opts)
	}
	if o.ns == nil && !IsEngineFunction(fn) && w.cfg.Namespace != DefaultNamespace {
		ns := w.cfg.Namespace
		o.ns = &ns
	}
	return o
}

// applyCallOptions is apart from resolve so that a call without options does not allocate its
// callOpts (the options take its address).
func applyCallOptions(opts []CallOption) callOpts {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Call invokes fn with payload (any JSON-marshalable value; json.RawMessage as is) and returns
// the raw result. Function errors are *Error.
func (w *Worker) Call(ctx context.Context, fn string, payload any, opts ...CallOption) (json.RawMessage, error) {
	o := w.resolve(fn, opts)
	timeout := o.timeout
	if timeout == 0 {
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		} else {
			timeout = DefaultCallTimeout
		}
	}
	c := w.liveConn()
	if c == nil {
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		if c, err = w.waitUp(wctx); err != nil {
			return nil, err
		}
	}
	return w.callOn(ctx, c, fn, payload, o, timeout)
}

// CallVoid invokes fn without waiting for any reply.
func (w *Worker) CallVoid(ctx context.Context, fn string, payload any, opts ...CallOption) error {
	o := w.resolve(fn, opts)
	data, err := marshalPayload(payload)
	if err != nil {
		return err
	}
	c, err := w.waitUp(ctx)
	if err != nil {
		return err
	}
	return w.write(c, &Message{Type: TypeInvokeFunction, FunctionID: fn, Data: data, Namespace: o.ns, Metadata: o.meta, Action: &Action{Type: "void"}})
}

func marshalPayload(p any) (json.RawMessage, error) {
	if p == nil {
		return json.RawMessage("{}"), nil
	}
	if r, ok := p.(json.RawMessage); ok {
		if !wire.Valid(r) {
			return nil, errors.New("payload is not valid JSON")
		}
		return r, nil
	}
	return json.Marshal(p)
}

func (w *Worker) waitUp(ctx context.Context) (*link, error) {
	for {
		w.mu.Lock()
		up, c, stopped := w.up, w.conn, w.err
		w.mu.Unlock()
		select {
		case <-w.done:
			if stopped == nil {
				stopped = errors.New("worker closed")
			}
			return nil, NewError(errcode.NotConnected, "not connected to the engine: %v", stopped)
		default:
		}
		select {
		case <-up:
			if c != nil {
				return c, nil
			}
		case <-ctx.Done():
			return nil, NewError(errcode.NotConnected, "not connected to the engine at %s", w.cfg.URL)
		case <-w.done:
		}
	}
}

func (w *Worker) callOn(ctx context.Context, c *link, fn string, payload any, o callOpts, timeout time.Duration) (json.RawMessage, error) {
	data, err := marshalPayload(payload)
	if err != nil {
		return nil, err
	}
	id := uuid.NewString() // iii's engine decodes invocation ids as UUIDs
	pc := w.pending.add(id, timeout+time.Second, ctx.Done())
	m := &Message{Type: TypeInvokeFunction, InvocationID: id, FunctionID: fn, Data: data, Namespace: o.ns, Metadata: o.meta, Action: o.action, TimeoutMS: timeout.Milliseconds()}
	if err := w.write(c, m); err != nil {
		w.pending.take(id)
		return nil, NewError(errcode.NotConnected, "sending to the engine: %v", err)
	}
	// The reply, a lost connection, the deadline and the end of ctx all arrive here: the last
	// two from the sweeper.
	r := <-pc.ch
	w.pending.release(pc)
	switch r {
	case nil:
		return nil, NewError(errcode.NotConnected, "connection to the engine was lost before %s replied", fn)
	case callExpired:
		return nil, timedOut(timeout)
	}
	res, rerr := r.Result, r.Error
	wire.Recycle(r)
	if rerr != nil {
		return nil, rerr
	}
	if len(res) == 0 {
		return json.RawMessage("null"), nil
	}
	return res, nil
}

func timedOut(timeout time.Duration) *Error {
	return NewError(errcode.ClientTimeout, "invocation timed out after %dms", timeout.Milliseconds())
}
