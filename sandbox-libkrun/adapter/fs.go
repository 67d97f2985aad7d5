package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/iii-go/iii/sandbox-libkrun/scode"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// fsHandler validates sandbox_id, bumps the idle clock and forwards the rest of the request to
// the guest agent.
func (s *Service) fsHandler(op string) Handler {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		trimmed := bytes.TrimSpace(raw)
		if len(trimmed) == 0 || trimmed[0] != '{' {
			return nil, scode.Invalid("the request must be a JSON object with sandbox_id")
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &body); err != nil {
			return nil, scode.Invalid(err.Error())
		}
		var sid string
		if rawID, ok := body["sandbox_id"]; ok {
			if err := json.Unmarshal(rawID, &sid); err != nil {
				return nil, scode.Invalid("field `sandbox_id` must be a string")
			}
		}
		delete(body, "sandbox_id")
		fwd, _ := json.Marshal(body)
		return s.fs(ctx, sid, op, fwd)
	}
}

// fs runs one fs op on a live sandbox. Guest failures keep their S21x code.
func (s *Service) fs(ctx context.Context, sandboxID, op string, req json.RawMessage) (json.RawMessage, error) {
	id, err := checkID(sandboxID)
	if err != nil {
		return nil, err
	}
	box, err := s.admit(id, false)
	if err != nil {
		return nil, err
	}
	reply, err := box.machine.FS(ctx, op, req)
	s.touch(box)
	if err != nil {
		var fe *vm.FSError
		if errors.As(err, &fe) {
			code := fe.Code
			if !scode.Known(code) {
				code = scode.S216
			}
			e := scode.FS(code, fe.Message)
			if len(fe.Fix) > 0 {
				e.Fix = fe.Fix
			}
			return nil, e
		}
		if machineDone(box.machine) {
			return nil, scode.Stopped(id)
		}
		return nil, scode.FS(scode.S216, "fs i/o error: "+err.Error())
	}
	return reply, nil
}

func (s *Service) touch(box *sandbox) {
	s.mu.Lock()
	box.lastActive = s.opt.Now()
	s.mu.Unlock()
}
