// Package scode is what the engine's sandbox router and the sandbox adapter share: the default
// adapter's name, the sandbox contract version, and every sandbox error code (S-code) with the
// error envelope {type, code, message, docs_url, retryable, fix, fix_note} it travels in. It is a
// leaf package, so the adapter imports it without the engine's router.
package scode

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// AdapterName is the sandbox adapter's package and function prefix, the one a binding names by
// default (req A2).
const AdapterName = "sandbox-libkrun"

// The sandbox contract version the engine speaks and the adapter implements: a router accepts an
// adapter of the same major.
const (
	ContractMajor = 1
	ContractMinor = 4
)

// ProcessMinor is the contract minor that added the process operations (sandbox::process::*):
// a router answers them S304 for an adapter of a lower minor.
const ProcessMinor = 2

// ExposeMinor is the contract minor that added exposed ports (sandbox::expose, unexpose,
// expose::list): a router answers them S304 for an adapter of a lower minor.
const ExposeMinor = 3

// SnapshotMinor is the contract minor that added the snapshots of running sandboxes
// (sandbox::snapshot, snapshot::list, snapshot::delete, fork, pause, resume).
const SnapshotMinor = 3

// EgressMinor is the contract minor whose create and run take network as "off", "on" or an
// egress policy object: a router answers such a call S304 for an adapter of a lower minor, which
// reads network as a bool only.
const EgressMinor = 4

// The documented sandbox codes (req A4). S301, S302 and S303 are answered by the engine's
// router, the rest by the adapter; every code has its one home here.
const (
	S001 = "S001" // invalid request
	S002 = "S002" // sandbox not found
	S003 = "S003" // exec concurrency cap reached
	S004 = "S004" // sandbox already stopped
	S100 = "S100" // image not in catalog or not allowlisted
	S101 = "S101" // rootfs not cached and auto_install off
	S102 = "S102" // image pull or extraction failed
	S200 = "S200" // exec timed out
	S210 = "S210" // invalid fs request
	S211 = "S211" // path or parent not found
	S212 = "S212" // wrong file type
	S213 = "S213" // already exists
	S214 = "S214" // directory not empty
	S215 = "S215" // permission denied
	S216 = "S216" // other fs I/O error
	S217 = "S217" // invalid regex
	S218 = "S218" // fs channel aborted
	S219 = "S219" // fs op unsupported by the guest agent
	S240 = "S240" // port exposure unsupported by the guest agent
	S230 = "S230" // process not found
	S231 = "S231" // process has no terminal
	S232 = "S232" // process still running at the wait's deadline
	S233 = "S233" // process has exited
	S250 = "S250" // sandbox cannot be snapshotted (forked, paused)
	S251 = "S251" // snapshot not found
	S300 = "S300" // VM boot failed
	S301 = "S301" // bound adapter not connected (router)
	S302 = "S302" // bound adapter speaks another contract major (router)
	S303 = "S303" // no adapter bound (router)
	S304 = "S304" // bound adapter's contract minor predates the operation (router)
	S400 = "S400" // resource limit exceeded
	S501 = "S501" // VM worker mount outside the adapter's host roots
)

// Error types of the envelope.
const (
	TypeValidation = "validation"
	TypeConfig     = "config"
	TypeInternal   = "internal"
	TypeTransient  = "transient"
	TypeExecution  = "execution"
	TypeFilesystem = "filesystem"
	TypePlatform   = "platform"
)

// DocsBase is the Sandboxes page; each code has an anchor there (lower-cased code).
const DocsBase = "https://iii.dev/docs/using-iii/sandboxes"

// RestartCommand restarts the adapter so that it re-reads its host roots (req G4).
const RestartCommand = "iii call compose::restart worker=" + AdapterName

type meta struct {
	typ     string
	retry   bool
	fixNote string
}

var table = map[string]meta{
	S001: {TypeValidation, false, "Fix the request as the message says; examples of each accepted shape are inline in it."},
	S002: {TypeValidation, false, "The sandbox is gone (stopped, reaped or never created). Create a new one with sandbox::create."},
	S003: {TypeValidation, false, "Every exec slot of this sandbox is busy and waiting will not free a foreground exec. Detach long-running servers (nohup cmd > log 2>&1 &) or stop this sandbox and create a new one."},
	S004: {TypeValidation, false, "The sandbox was stopped or reaped for idleness. Create a new one with sandbox::create."},
	S100: {TypeConfig, false, "Set `image` to a name listed by sandbox::catalog::list that is in image_allowlist, or add a custom_images entry and allowlist it in the adapter's config_override."},
	S101: {TypeInternal, false, "Pull the image into ~/.iii/cache/ or set auto_install: true in the adapter's config_override."},
	S102: {TypeTransient, true, "Pulling the image failed; retry after a short delay. The image must ship a linux manifest for this host's architecture."},
	S200: {TypeExecution, false, "Raise timeout_ms (up to max_exec_timeout_ms) or split the work into shorter commands."},
	S210: {TypeFilesystem, false, ""},
	S211: {TypeFilesystem, false, ""},
	S212: {TypeFilesystem, false, ""},
	S213: {TypeFilesystem, false, ""},
	S214: {TypeFilesystem, false, ""},
	S215: {TypeFilesystem, false, ""},
	S216: {TypeFilesystem, false, ""},
	S217: {TypeFilesystem, false, ""},
	S218: {TypeTransient, true, "Retry the operation with a fresh channel."},
	S219: {TypeFilesystem, false, ""},
	S240: {TypePlatform, false, "The sandbox's guest agent predates exposed ports (agent revision 10): upgrade the sandbox adapter and create a new sandbox."},
	S230: {TypeValidation, false, "The process id is unknown in this sandbox (never started there, or an exited process the guest no longer remembers); sandbox::process::list shows the ones it knows."},
	S231: {TypeValidation, false, "Only a process started with tty: {rows, cols} has a terminal to resize."},
	S232: {TypeTransient, true, "The process is still running; call sandbox::process::wait again, or signal it with sandbox::process::signal."},
	S233: {TypeValidation, false, "The process has already exited; sandbox::process::wait or sandbox::process::list give how it ended."},
	S250: {TypeValidation, false, "Only a sandbox without networking that was restored from an image snapshot can be saved: create it with snapshots: on (the default) and no network, once the image's snapshot exists (the first create of an image makes it)."},
	S251: {TypeValidation, false, "The snapshot id is unknown (never made, or deleted); sandbox::snapshot::list shows the ones kept."},
	S300: {TypePlatform, false, "The VM could not boot; this is not recoverable by retrying. Check the host requirements printed by the adapter at start."},
	S301: {TypePlatform, false, "Start or install the sandbox adapter in its namespace."},
	S302: {TypeConfig, false, "Install an adapter of contract major " + strconv.Itoa(ContractMajor) + ": `iii call compose::add worker=iii-sandbox` pins the range."},
	S303: {TypeConfig, false, "Add a top-level sandbox: section to this engine's config.yaml (adapter: " + AdapterName + ", namespace: default) " +
		"and start the adapter in that namespace, or run the engine from a Compose file that sets engine.sandbox."},
	S304: {TypeConfig, false, "Upgrade the sandbox adapter to one of contract 1." + strconv.Itoa(ContractMinor) + " (`iii call compose::add worker=iii-sandbox` installs the current one), or use sandbox::exec, which every 1.x adapter serves."},
	S400: {TypeConfig, false, "A configured limit was reached; stop a sandbox or ask for less, or raise the limit in the adapter's config_override."},
	S501: {TypeConfig, false, "Restart the adapter so that it reads its host roots again (" + RestartCommand + "), or move the worker under the compose directory."},
}

// Error is one S-code failure. Its Error text is the JSON envelope, so a handler error carrying it
// reaches the caller as the envelope itself.
type Error struct {
	Type      string          `json:"type"`
	Code      string          `json:"code"`
	Message   string          `json:"message"`
	DocsURL   string          `json:"docs_url"`
	Retryable bool            `json:"retryable"`
	Fix       json.RawMessage `json:"fix"`
	FixNote   *string         `json:"fix_note"`
}

// New builds the envelope of code with message.
func New(code, message string) *Error {
	m := table[code]
	e := &Error{Type: m.typ, Code: code, Message: message, DocsURL: DocsURL(code), Retryable: m.retry, Fix: json.RawMessage("null")}
	if m.fixNote != "" {
		note := m.fixNote
		e.FixNote = &note
	}
	return e
}

// WithFix returns e with fix set to the JSON of v (a value to merge into the original request).
func (e *Error) WithFix(v any) *Error {
	b, err := json.Marshal(v)
	if err == nil {
		e.Fix = b
	}
	return e
}

// WithNote returns e with its fix_note replaced by note (a remedy that names the namespace).
func (e *Error) WithNote(note string) *Error {
	e.FixNote = &note
	return e
}

// DocsURL is the Sandboxes page entry of code (req I5).
func DocsURL(code string) string { return DocsBase + "#" + strings.ToLower(code) }

// Known reports whether code is a documented S-code.
func Known(code string) bool { _, ok := table[code]; return ok }

// JSON is the envelope as JSON.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(e)
	return b
}

// Error returns the envelope as JSON text.
func (e *Error) Error() string { return string(e.JSON()) }

// As returns the *Error inside err, if any.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Invalid is S001 `invalid request: {detail}`.
func Invalid(detail string) *Error { return New(S001, "invalid request: "+detail) }

// NotFound is S002 `sandbox not found: {id}`.
func NotFound(id string) *Error { return New(S002, "sandbox not found: "+id) }

// ExecCap is S003.
func ExecCap(id string) *Error {
	return New(S003, "sandbox "+id+" is at its exec concurrency cap (max_concurrent_exec_per_sandbox)")
}

// Stopped is S004 `sandbox already stopped: {id}`.
func Stopped(id string) *Error { return New(S004, "sandbox already stopped: "+id) }

// ImageNotAllowlisted is S100 for an image the catalog knows but image_allowlist does not list:
// the allowlist fails closed.
func ImageNotAllowlisted(image string) *Error {
	return New(S100, "image '"+image+"' is in the catalog but not in image_allowlist; add it to image_allowlist in the sandbox-libkrun container's config_override (see S100 docs)").
		WithFix(map[string]any{"image_allowlist": []string{image}})
}

// ImageNotAllowed is S100 for an image the catalog does not know.
func ImageNotAllowed(image string) *Error {
	return New(S100, "image '"+image+"' not in catalog; valid presets are 'python' and 'node', or add a custom image via worker config (see S100 docs)").
		WithFix(map[string]string{"image": "python"})
}

// RootfsMissing is S101.
func RootfsMissing(image, ref string) *Error {
	return New(S101, "rootfs missing on disk for image '"+image+"'. Pull "+ref+" into ~/.iii/cache/ or set auto_install: true (see S101 docs)")
}

// PullFailed is S102 `auto-install failed for image '{image}': {reason}`.
func PullFailed(image, reason string) *Error {
	return New(S102, "auto-install failed for image '"+image+"': "+reason)
}

// ChannelAborted is S218 `fs channel aborted: {detail}`: a stream channel of fs::read or
// fs::write could not be opened or closed mid-op.
func ChannelAborted(detail string) *Error { return New(S218, "fs channel aborted: "+detail) }

// ProcessNotFound is S230 `process not found: {id} in sandbox {sandbox}`.
func ProcessNotFound(sandbox, id string) *Error {
	return New(S230, "process not found: "+id+" in sandbox "+sandbox)
}

// NoTerminal is S231: a resize of a process started without tty.
func NoTerminal(sandbox, id string) *Error {
	return New(S231, "process "+id+" in sandbox "+sandbox+" has no terminal (it was not started with tty)")
}

// StillRunning is S232: sandbox::process::wait reached its deadline first.
func StillRunning(sandbox, id, after string) *Error {
	return New(S232, "process "+id+" in sandbox "+sandbox+" is still running after "+after+"; it goes on")
}

// ProcessExited is S233: a signal to a process that has exited.
func ProcessExited(sandbox, id string) *Error {
	return New(S233, "process "+id+" in sandbox "+sandbox+" has already exited")
}

// BootFailed is S300 `VM boot failed: {detail}`.
func BootFailed(detail string) *Error { return New(S300, "VM boot failed: "+detail) }

// Limit is S400 `resource limit exceeded: {detail}`.
func Limit(detail string) *Error { return New(S400, "resource limit exceeded: "+detail) }

// FS is an S21x failure with its own message.
func FS(code, message string) *Error { return New(code, message) }

// OutsideRoots is S501: a VM worker mount that lies under none of the host roots (req G3).
func OutsideRoots(path string, roots []string) *Error {
	list := strings.Join(roots, ", ")
	if list == "" {
		list = "none"
	}
	return New(S501, "host path '"+path+"' is outside the adapter's host roots ("+list+
		"); the adapter reads its roots only when it starts: restart it with `"+RestartCommand+
		"`, or move the worker under the compose directory (see "+DocsURL(S501)+")").
		WithFix(map[string]any{"host_roots": roots})
}
