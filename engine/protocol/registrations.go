package protocol

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/iii-go/iii/engine/internal/wire"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Handler serves one invocation. The returned value is sent as JSON (a json.RawMessage as is);
// a returned *Error is sent as is, any other error as invocation_failed.
type Handler func(ctx context.Context, payload json.RawMessage) (any, error)

// FuncOption sets optional fields of a registered function.
type FuncOption func(*Message)

// WithDescription sets the function's description.
func WithDescription(d string) FuncOption { return func(m *Message) { m.Description = d } }

// WithRequestFormat sets the JSON Schema of the function's payload.
func WithRequestFormat(schema json.RawMessage) FuncOption {
	return func(m *Message) { m.RequestFormat = schema }
}

// WithResponseFormat sets the JSON Schema of the function's result.
func WithResponseFormat(schema json.RawMessage) FuncOption {
	return func(m *Message) { m.ResponseFormat = schema }
}

// Protected makes the engine admit calls to the function only from connections holding this
// worker's token (or one the same token-protected namespace accepts); anyone else gets
// FORBIDDEN. The worker must connect with a token.
func Protected() FuncOption { return func(m *Message) { m.Protected = true } }

type function struct {
	frame   *Message
	handler Handler
}

// Register adds a function; when connected it is sent to the engine at once, and it is sent
// again after every reconnect.
func (w *Worker) Register(id string, h Handler, opts ...FuncOption) error {
	if id == "" || h == nil {
		return errors.New("register: id and handler are required")
	}
	m := &Message{Type: TypeRegisterFunction, ID: id}
	for _, o := range opts {
		o(m)
	}
	w.mu.Lock()
	w.funcs[id] = &function{frame: m, handler: h}
	w.publishFuncs()
	c := w.liveConnLocked()
	w.mu.Unlock()
	if c != nil {
		return w.write(c, m)
	}
	return nil
}

// Unregister removes a function.
func (w *Worker) Unregister(id string) error {
	w.mu.Lock()
	delete(w.funcs, id)
	w.publishFuncs()
	c := w.liveConnLocked()
	w.mu.Unlock()
	if c != nil {
		return w.write(c, &Message{Type: TypeUnregisterFunction, ID: id})
	}
	return nil
}

// publishFuncs gives serve a copy of funcs, so a served call takes no lock; w.mu is held.
func (w *Worker) publishFuncs() {
	fns := make(map[string]*function, len(w.funcs))
	for id, f := range w.funcs {
		fns[id] = f
	}
	w.fns.Store(&fns)
}

func (w *Worker) serve(c *link, m *Message) {
	defer wire.Recycle(m) // the reply is encoded before serve returns; the handler got m.Data only
	var f *function
	if fns := w.fns.Load(); fns != nil {
		f = (*fns)[m.FunctionID]
	}
	var res any
	var err error
	if f == nil {
		err = NewError(errcode.FunctionNotFound, "Function %s not found in namespace %s.", m.FunctionID, w.cfg.Namespace)
	} else {
		res, err = invokeHandler(w.ctx, f.handler, m.Data)
	}
	if m.IsVoid() || w.ctx.Err() != nil {
		return // closing: the engine answers invocation_stopped for us
	}
	out := &Message{Type: TypeInvocationResult, InvocationID: m.InvocationID, FunctionID: m.FunctionID}
	if err != nil {
		out.Error = AsError(err)
	} else if raw, merr := marshalResult(res); merr != nil {
		out.Error = NewError(errcode.InvocationFailed, "result is not JSON: %v", merr)
	} else {
		out.Result = raw
	}
	if werr := w.write(c, out); werr != nil {
		w.cfg.Logger.Debug("replying", "err", werr)
	}
}

func invokeHandler(ctx context.Context, h Handler, data json.RawMessage) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = NewError(errcode.InvocationFailed, "handler panicked: %v", r)
		}
	}()
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return h(ctx, data)
}

// AsError turns any error into a wire error: an *Error as is, others as invocation_failed.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return NewError(errcode.InvocationFailed, "%s", err.Error())
}

func marshalResult(v any) (json.RawMessage, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if !wire.Valid(r) {
			return nil, errors.New("handler returned invalid raw JSON")
		}
		return r, nil
	}
	return json.Marshal(v)
}
