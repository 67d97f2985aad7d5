// Package errcode holds every error code the engine documents, one constant per code. Function
// errors carry them as {"code","message"}; CLI errors print them as error[CODE]: message.
package errcode

// Protocol codes carried in invocationresult errors: those of iii's engine, byte for byte.
const (
	// FunctionNotFound: no such function id in the requested namespace.
	FunctionNotFound = "function_not_found"
	// InvocationFailed: the handler returned an error or panicked.
	InvocationFailed = "invocation_failed"
	// InvocationStopped: the worker serving the call disconnected before replying.
	InvocationStopped = "invocation_stopped"
	// Timeout: the engine gave up waiting for the serving worker (invokefunction timeout_ms).
	Timeout = "timeout"
	// ClientTimeout: the SDK gave up waiting for the engine.
	ClientTimeout = "TIMEOUT"
	// InvalidNamespace: a namespace field is present but blank.
	InvalidNamespace = "INVALID_NAMESPACE"
	// Forbidden: the caller may not use this function (an owner-only engine function, or a
	// protected function called without its worker's token).
	Forbidden = "FORBIDDEN"
	// InvalidArguments: the payload of a built-in function is malformed.
	InvalidArguments = "INVALID_ARGUMENTS"
	// FunctionNamespaceConflict: another live worker with other rights (another token or
	// protection, or an HTTP-invoked function) already serves this id in the namespace.
	FunctionNamespaceConflict = "FUNCTION_NAMESPACE_CONFLICT"
	// FunctionPrefixConflict: the id is under a prefix the engine keeps to one worker (the bound
	// sandbox adapter's "<adapter>::"), and another live worker already serves a function there.
	FunctionPrefixConflict = "FUNCTION_PREFIX_CONFLICT"
	// HTTPInvocationInvalid: a registerfunction's invocation (an HTTP-invoked function) is
	// malformed: not {url, method, timeout_ms, headers, auth}, an unknown method or auth type, a
	// bad header or a non-positive timeout_ms.
	HTTPInvocationInvalid = "HTTP_INVOCATION_INVALID"
	// HTTPURLRefused: an HTTP-invoked function's URL is refused by iii-http-functions security:
	// not https under require_https, a host outside url_allowlist, or a private or loopback
	// address under block_private_ips.
	HTTPURLRefused = "HTTP_URL_REFUSED"
	// HTTPAuthUnresolved: an HTTP-invoked function's auth names a secret whose environment
	// variable is not set in the engine's environment.
	HTTPAuthUnresolved = "HTTP_AUTH_UNRESOLVED"
	// HTTPSecretRefused: an HTTP-invoked function's auth names a secret that config.yaml's
	// iii-http-functions secrets: does not grant, or grants only for other hosts than the URL's.
	HTTPSecretRefused = "HTTP_SECRET_REFUSED"
	// ReservedNamespace: engine::*, configuration::* and sandbox::* belong to the engine.
	ReservedNamespace = "RESERVED_FUNCTION_ID"
	// TokenRequired: the namespace is token-protected and the worker presented no token.
	TokenRequired = "NAMESPACE_TOKEN_REQUIRED"
	// TokenInvalid: the namespace is token-protected and the presented token does not match.
	TokenInvalid = "NAMESPACE_TOKEN_INVALID"
	// NotConnected: the SDK has no live connection to the engine.
	NotConnected = "NOT_CONNECTED"
	// Unknown: an error body that was not an object with a code (e.g. a bare string).
	Unknown = "UNKNOWN"
	// EnqueueError: an invocation asked for action enqueue and no queue serves it.
	EnqueueError = "enqueue_error"
)

// Engine limit and handshake codes (README.md, Limits). Connection-level ones are the close
// reason of the WebSocket (prefixed to a message) and a log line; call-level ones are function
// errors.
const (
	// OriginForbidden: a WebSocket handshake came from a browser page of another origin, not in
	// the listener's allowed_origins (HTTP 403).
	OriginForbidden = "ORIGIN_FORBIDDEN"
	// HostForbidden: a handshake to a loopback listener named a Host that is not a loopback name
	// or address (DNS rebinding; HTTP 403).
	HostForbidden = "HOST_FORBIDDEN"
	// AuthError: a listener's rbac auth function refused a connection, is missing, failed, did
	// not answer in time or answered no AuthResult; the connection gets iii's error frame
	// {"type":"error","error":{"code":"AUTH_ERROR",...}} and is closed (1008).
	AuthError = "AUTH_ERROR"
	// SlowConsumer: a connection's outbound queue overflowed or a write missed its deadline; the
	// connection is closed.
	SlowConsumer = "SLOW_CONSUMER"
	// FrameBudgetExceeded: the engine-wide budget for frames being read is spent, and the
	// connection holding the most of it is closed (status 1013, try again later); or a connection
	// is reading more than its share (a quarter) of the budget.
	FrameBudgetExceeded = "FRAME_BUDGET_EXCEEDED"
	// FrameTimeout: a message's bytes did not arrive within the frame deadline (a time plus a
	// minimum rate, from its first frame header); the connection is closed (status 1008).
	FrameTimeout = "FRAME_TIMEOUT"
	// RegistrationTimeout: a connection neither called engine::workers::register nor registered a
	// function within the registration deadline; it is closed.
	RegistrationTimeout = "REGISTRATION_TIMEOUT"
	// TooManyCalls: a connection has the maximum number of engine-served calls in flight.
	TooManyCalls = "TOO_MANY_CALLS"
	// ChannelLimit: the engine holds the maximum number of stream channels.
	ChannelLimit = "CHANNEL_LIMIT"
	// ObserverLimit: a connection, or the engine, holds the maximum number of observers.
	ObserverLimit = "OBSERVER_LIMIT"
	// EntryTooLarge: a configuration value is larger than the stored-entry cap.
	EntryTooLarge = "ENTRY_TOO_LARGE"
)

// Configuration worker codes, answered by configuration::* (req C2, C3, C6).
const (
	// NotRegistered: configuration::set on an id nobody registered.
	NotRegistered = "NOT_REGISTERED"
	// NotFound: configuration::get or ::schema on an unknown id.
	NotFound = "NOT_FOUND"
	// InvalidID: the id does not match [a-z0-9_-]{1,64}.
	InvalidID = "INVALID_ID"
	// SchemaInvalid: a value fails its schema, or the schema itself does not compile.
	SchemaInvalid = "SCHEMA_INVALID"
	// SchemaUnavailable: set on a stored id whose owner has not registered its schema this session.
	SchemaUnavailable = "SCHEMA_UNAVAILABLE"
	// ExpandFailed: get found ${VAR} with no default and VAR unset.
	ExpandFailed = "EXPAND_FAILED"
	// AdapterError: the configuration store could not persist an entry.
	AdapterError = "ADAPTER_ERROR"
)

// config.yaml and command-line codes.
const (
	// ConfigInvalid: config.yaml is not valid (bad YAML, unknown key, wrong type).
	ConfigInvalid = "CONFIG_INVALID"
	// ConfigUnsupported: config.yaml sets a key this engine does not implement (a second
	// instance of an engine worker other than iii-worker-manager, such as configuration#two, a
	// non-zero ttl_seconds, iii-stream's redis and bridge adapters); refused rather than
	// accepted and ignored.
	ConfigUnsupported = "CONFIG_UNSUPPORTED"
	// ConfigNotFound: the file named by --config does not exist.
	ConfigNotFound = "CONFIG_NOT_FOUND"
	// UnsupportedConfigWorkers: config.yaml declares workers the engine no longer runs.
	UnsupportedConfigWorkers = "UNSUPPORTED_CONFIG_WORKERS"
	// ListenFailed: the worker listener could not bind its address.
	ListenFailed = "LISTEN_FAILED"
	// Usage: bad command-line arguments.
	Usage = "USAGE"
	// UnknownCommand: `iii WORD` names no command of iii.
	UnknownCommand = "UNKNOWN_COMMAND"
	// EngineUnreachable: iii call, or the sandbox adapter at start, found no engine at the address.
	EngineUnreachable = "ENGINE_UNREACHABLE"
	// CallFailed: iii call got an error that is not a function error.
	CallFailed = "CALL_FAILED"
)

// Start-up codes of the sandbox adapter process (sandbox-libkrun), printed before it exits 1.
const (
	// InvalidSettings: the adapter's settings (its configuration entry or --config file) are not
	// valid; it does not start with a bad value.
	InvalidSettings = "INVALID_SETTINGS"
	// FirmwareInstallFailed: the VM firmware the adapter carries could not be installed.
	FirmwareInstallFailed = "FIRMWARE_INSTALL_FAILED"
	// HostCheckFailed: the host cannot run sandbox VMs (the message lists each problem).
	HostCheckFailed = "HOST_CHECK_FAILED"
	// RegisterFailed: a function of the adapter could not be registered with the worker.
	RegisterFailed = "REGISTER_FAILED"
)

// Start-up codes of the event workers (http, cron, queue, state), printed before they exit 1.
const (
	// StartFailed: the worker could not set up what it serves (its store, its listener).
	StartFailed = "START_FAILED"
	// RegistrationRefused: the engine ended the worker's connection, refusing its registration.
	RegistrationRefused = "REGISTRATION_REFUSED"
)

// Host requirements of the sandbox adapter (req H2, H3), checked by internal/base/hostreq.
const (
	// KVMAccess: /dev/kvm is missing, or the user cannot read and write it (Linux).
	KVMAccess = "KVM_ACCESS"
	// LibCapNGMissing: libcap-ng.so.0 (Debian's libcap-ng0) is not installed (Linux).
	LibCapNGMissing = "LIBCAPNG_MISSING"
	// FirmwareMissing: the VM kernel or initramfs is not in ~/.iii/lib.
	FirmwareMissing = "FIRMWARE_MISSING"
	// MkfsMissing: mkfs.ext4 (e2fsprogs) is not installed, so VM workers would get no state disk.
	MkfsMissing = "MKFS_MISSING"
	// UnsupportedPlatform: the adapter, or a binary package Compose installs, ships no build for
	// this host (musl Linux, Intel Mac, ...).
	UnsupportedPlatform = "UNSUPPORTED_PLATFORM"
)

// Trigger and observer codes of iii's trigger frames and of 0.26's observe frames, carried in
// the error of a triggerregistrationresult or of an observeresult.
const (
	// TriggerRegistrationFailed: a trigger was malformed, its id taken, or its provider refused
	// it without a code of its own (the 0.22 SDKs' code for a throwing handler).
	TriggerRegistrationFailed = "trigger_registration_failed"
	// TriggerTypeNotFound: the provider does not know the trigger's type (0.22 SDK provider side).
	TriggerTypeNotFound = "trigger_type_not_found"
	// Unsupported: a 0.26 observe frame reached an engine that advertises no observe feature.
	Unsupported = "UNSUPPORTED"
)
