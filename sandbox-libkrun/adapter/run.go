package adapter

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/iii-go/iii/engine/sandbox/scode"
)

// RunFile is one sibling file written before the code.
type RunFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// RunRequest is the body of run. It takes no cpus, memory_mb, name or idle timeout; network is
// create's (contract 1.4).
type RunRequest struct {
	Image       *string         `json:"image"`
	Network     json.RawMessage `json:"network"`
	Code        *string         `json:"code"`
	Lang        *string         `json:"lang"`
	Files       []RunFile       `json:"files"`
	Env         json.RawMessage `json:"env"`
	Stdin       *string         `json:"stdin"`
	TimeoutMS   *uint64         `json:"timeout_ms"`
	KeepSandbox bool            `json:"keep_sandbox"`
}

// RunReply is the reply of run: the exec fields, plus sandbox_id when keep_sandbox is set.
type RunReply struct {
	ExecReply
	SandboxID string `json:"sandbox_id,omitempty"`
}

// interpreter maps lang to the interpreter and the code file's extension; any other value is a
// literal interpreter path and the file gets .txt.
func interpreter(lang string) (string, string) {
	switch lang {
	case "node", "js", "javascript":
		return "node", "js"
	case "python", "py":
		return "python3", "py"
	case "shell", "sh", "bash":
		return "/bin/sh", "sh"
	}
	return lang, "txt"
}

// Run answers run: create, write the files and the code, exec the interpreter, stop (unless
// keep_sandbox). A failing step keeps its inner code and names the step.
func (s *Service) Run(ctx context.Context, raw json.RawMessage) (any, error) {
	var req RunRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	switch {
	case req.Image == nil || *req.Image == "":
		return nil, scode.Invalid("image is required (a catalog name such as 'python' or 'node')")
	case req.Code == nil:
		return nil, scode.Invalid("code is required")
	case req.Lang == nil || *req.Lang == "":
		return nil, scode.Invalid("lang is required: node, python, shell, or an interpreter path")
	}
	for i, f := range req.Files {
		if f.Path == "" {
			return nil, scode.Invalid(fmt.Sprintf("files[%d].path is required", i))
		}
	}
	// Validate what exec would reject before a VM is booted for nothing.
	if _, err := parseStdin(req.Stdin); err != nil {
		return nil, err
	}
	if _, err := s.execTimeout(req.TimeoutMS); err != nil {
		return nil, err
	}
	box, err := s.create(ctx, CreateRequest{Image: req.Image, Env: req.Env, Network: req.Network})
	if err != nil {
		return nil, stepError("create", "", err)
	}
	id := box.id
	fail := func(step string, err error) (any, error) {
		if !req.KeepSandbox {
			s.stop(id)
		}
		return nil, stepError(step, id, err)
	}
	for _, f := range req.Files {
		body, _ := json.Marshal(map[string]any{"path": f.Path, "content": f.Content, "mode": "0644", "parents": true})
		if _, err := s.fs(ctx, id, "write", body); err != nil {
			return fail("fs::write (sibling file)", err)
		}
	}
	interp, ext := interpreter(*req.Lang)
	file := "/tmp/run." + ext
	body, _ := json.Marshal(map[string]any{"path": file, "content": *req.Code, "mode": "0644", "parents": true})
	if _, err := s.fs(ctx, id, "write", body); err != nil {
		return fail("fs::write (code)", err)
	}
	res, err := s.exec(ctx, ExecRequest{SandboxID: id, Argv: []string{interp, file}, Stdin: req.Stdin, TimeoutMS: req.TimeoutMS})
	if err != nil {
		return fail("exec", err)
	}
	reply := RunReply{ExecReply: *res}
	if req.KeepSandbox {
		reply.SandboxID = id
	} else {
		s.stop(id)
	}
	return reply, nil
}

// stepError wraps a sub-step failure of run, keeping its code.
func stepError(step, id string, err error) error {
	inner, ok := scode.As(err)
	if !ok {
		inner = scode.New(scode.S300, err.Error())
	}
	e := scode.New(inner.Code, fmt.Sprintf("during sandbox::run step `%s` (sandbox_id=%s): %s", step, id, inner.Message))
	return e.WithFix(map[string]any{"context": step, "sandbox_id": id, "inner_code": inner.Code})
}
