package scode

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// Every S-code of the 0.25 in-engine daemon keeps its code, type,
// retryability and message format (req A4). Two messages name a 0.26 remedy where 0.25 named a
// command that is gone or an ambiguity it had: S100 for an image the catalog knows but
// image_allowlist lacks (0.25 used the not-in-catalog text for both) and S101 (0.25 said
// `iii worker add`, removed with iii-worker). Their code and type are unchanged. docs_url points
// at the Sandboxes page (req I5). The codes contracts 1.2 and 1.3 added (S230–S233, S304,
// S250, S251) are pinned alongside.
func TestCodesMatchTheReference(t *testing.T) {
	ref := []struct {
		code, typ string
		retry     bool
		err       *Error // built by the adapter's constructor; nil: built with New
		message   string // the 0.25 format with its placeholders filled in; "" when free-form
	}{
		{S001, TypeValidation, false, Invalid("bad"), "invalid request: bad"},
		{S002, TypeValidation, false, NotFound("id-1"), "sandbox not found: id-1"},
		{S003, TypeValidation, false, ExecCap("id-1"), "sandbox id-1 is at its exec concurrency cap (max_concurrent_exec_per_sandbox)"},
		{S004, TypeValidation, false, Stopped("id-1"), "sandbox already stopped: id-1"},
		{S100, TypeConfig, false, ImageNotAllowed("ruby"), "image 'ruby' not in catalog; valid presets are 'python' and 'node', or add a custom image via worker config (see S100 docs)"},
		{S100, TypeConfig, false, ImageNotAllowlisted("node"), ""},
		{S101, TypeInternal, false, RootfsMissing("python", "docker.io/iiidev/python:latest"), ""},
		{S102, TypeTransient, true, PullFailed("python", "why"), "auto-install failed for image 'python': why"},
		{S200, TypeExecution, false, nil, ""},
		{S210, TypeFilesystem, false, nil, ""},
		{S211, TypeFilesystem, false, nil, ""},
		{S212, TypeFilesystem, false, nil, ""},
		{S213, TypeFilesystem, false, nil, ""},
		{S214, TypeFilesystem, false, nil, ""},
		{S215, TypeFilesystem, false, nil, ""},
		{S216, TypeFilesystem, false, nil, ""},
		{S217, TypeFilesystem, false, nil, ""},
		{S218, TypeTransient, true, ChannelAborted("closed"), "fs channel aborted: closed"},
		{S219, TypeFilesystem, false, nil, ""},
		{S230, TypeValidation, false, ProcessNotFound("sb-1", "p3"), "process not found: p3 in sandbox sb-1"},
		{S231, TypeValidation, false, NoTerminal("sb-1", "p3"), "process p3 in sandbox sb-1 has no terminal (it was not started with tty)"},
		{S232, TypeTransient, true, StillRunning("sb-1", "p3", "30s"), "process p3 in sandbox sb-1 is still running after 30s; it goes on"},
		{S233, TypeValidation, false, ProcessExited("sb-1", "p3"), "process p3 in sandbox sb-1 has already exited"},
		{S250, TypeValidation, false, nil, ""},
		{S251, TypeValidation, false, nil, ""},
		{S300, TypePlatform, false, BootFailed("no kvm"), "VM boot failed: no kvm"},
		{S304, TypeConfig, false, nil, ""},
		{S400, TypeConfig, false, Limit("max_concurrent_sandboxes (32) reached"), "resource limit exceeded: max_concurrent_sandboxes (32) reached"},
	}
	for _, r := range ref {
		if !Known(r.code) {
			t.Errorf("%s: the 0.25 code is gone", r.code)
			continue
		}
		e := r.err
		if e == nil {
			e = New(r.code, "m")
		}
		if e.Code != r.code || e.Type != r.typ || e.Retryable != r.retry {
			t.Errorf("%s: code %s, type %s, retryable %v; 0.25: %s, %s, %v", r.code, e.Code, e.Type, e.Retryable, r.code, r.typ, r.retry)
		}
		if r.message != "" && e.Message != r.message {
			t.Errorf("%s: message %q; 0.25 format gives %q", r.code, e.Message, r.message)
		}
		if want := "https://iii.dev/docs/using-iii/sandboxes#" + strings.ToLower(r.code); e.DocsURL != want {
			t.Errorf("%s: docs_url %q, want %q", r.code, e.DocsURL, want)
		}
	}
}

// The envelope keeps 0.25's seven keys (req A4).
func TestEnvelopeMatchesTheReference(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal(Invalid("x").JSON(), &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if got, want := strings.Join(keys, ","), "code,docs_url,fix,fix_note,message,retryable,type"; got != want {
		t.Errorf("envelope keys %s, 0.25: %s", got, want)
	}
}
