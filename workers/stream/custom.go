package stream

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// CodeJSONError is iii's code for a custom stream function whose result is not the shape its
// operation returns.
const CodeJSONError = "JSON_ERROR"

// Custom streams, as iii's: a worker that calls iii-sdk's createStream(name, impl) registers
// stream::get(<name>), stream::set(<name>), stream::delete(<name>), stream::list(<name>) and
// stream::list_groups(<name>) (and may register stream::update(<name>)). While such a function
// is registered, the operation of that name on stream <name> calls it instead of the store; the
// changes a custom set, update or delete reports still go to the stream's triggers and
// WebSocket clients. An operation with no custom function uses the store.

// customID is the id of the custom function of operation fn ("stream::get") for stream name.
func customID(fn, name string) string { return fn + "(" + name + ")" }

// custom calls the custom function of fn for stream name with payload. ok is false when no such
// function is registered: the engine answered function_not_found for that very id (a custom
// function that itself fails with another function's function_not_found is a failure of it).
func (s *Service) custom(ctx context.Context, fn, name string, payload any) (out json.RawMessage, ok bool, err error) {
	if s.call == nil {
		return nil, false, nil
	}
	id := customID(fn, name)
	out, err = s.call.Call(ctx, id, payload)
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code == errcode.FunctionNotFound && strings.HasPrefix(pe.Message, "Function "+id+" not found") {
		return nil, false, nil
	}
	return out, true, err
}

// customWrite serves a set, update or delete (fn) of r's stream by its custom function when one
// is registered (ok): it reports the change the function answers to the stream's triggers and
// subscribers, and returns the function's result. code is the operation's error code.
func (s *Service) customWrite(ctx context.Context, fn, code string, r request, payload json.RawMessage) (res any, ok bool, err error) {
	out, ok, cerr := s.custom(ctx, fn, r.StreamName, payload)
	if !ok {
		return nil, false, nil
	}
	old, nw, err := customChange(fn, r.StreamName, code, out, cerr)
	switch {
	case err != nil:
		return nil, true, err
	case fn == "stream::delete" && old != nil:
		s.changed(r, old, nil)
	case fn != "stream::delete" && nw != nil:
		s.changed(r, old, nw)
	}
	return out, true, nil
}

// customChange reads the result of a custom set, update or delete: {old_value?, new_value?},
// null members being absent. code is the operation's error code.
func customChange(fn, name, code string, out json.RawMessage, callErr error) (old, nw json.RawMessage, err error) {
	id := customID(fn, name)
	if callErr != nil {
		return nil, nil, protocol.NewError(code, "%s failed: %v", id, callErr)
	}
	if isNull(out) {
		return nil, nil, protocol.NewError(code, "%s returned no result", id)
	}
	var r struct {
		Old json.RawMessage `json:"old_value"`
		New json.RawMessage `json:"new_value"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, nil, protocol.NewError(CodeJSONError, "%s returned %s, not {old_value, new_value}: %v", id, clip(out), err)
	}
	if isNull(r.Old) {
		r.Old = nil
	}
	if isNull(r.New) {
		r.New = nil
	}
	return r.Old, r.New, nil
}

func isNull(v json.RawMessage) bool {
	t := strings.TrimSpace(string(v))
	return t == "" || t == "null"
}

// clip is v cut to 80 bytes, for an error message.
func clip(v json.RawMessage) string {
	if len(v) > 80 {
		return string(v[:80]) + "…"
	}
	return string(v)
}
