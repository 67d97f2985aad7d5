// Package core is the engine's function router: it accepts worker connections on the WebSocket
// listener, keys functions by (namespace, id), routes invocations between workers and to the
// engine's built-in functions, and enforces project tokens on protected namespaces.
//
// Built-in functions (served whatever namespace a call names, listed in default):
//
//	engine::workers::register  {name, namespace?, runtime, version, ...} -> {success, worker_id, namespace}
//	engine::workers::list      {search?, runtime?, status?} -> {workers: [{id, name, namespace, description, version, runtime, os, status, function_count, connected_at_ms, active_invocations, isolation, ip_address, pid, registered, functions, connected_at}]}
//	engine::functions::list    {namespace?} -> {functions: [{function_id, namespace, description, worker_id, worker_name, ...}]}
//	engine::channels::create   {buffer_size?} -> {channel_id, reader, writer}   (stream channels, below)
//	engine::channels::remove   {channel_id, access_key} -> null   (abort and forget one at once)
//	engine::triggers::list     -> {triggers: [{id, description, namespace, worker_id, worker_name, instance_count, ...}]}
//	engine::registered-triggers::list  {trigger_type?, function_id?, worker?, search?, include_internal?, include_pending?, include_refused?} -> {registered_triggers: [{id, trigger_type, function_id, worker_name, status, config, config_summary, ...}]}
//	configuration::*           see package configuration (publish is owner-only)
//	sandbox::*, engine::sandbox::bind   see package sandbox (bind is owner-only)
//
// Errors: function_not_found ("Function <id> not found in namespace <ns>." plus where it is
// registered), invocation_failed (from the worker), invocation_stopped (the serving worker
// disconnected), timeout (the call's timeout_ms passed; checked every 20 ms), and at
// registration NAMESPACE_TOKEN_REQUIRED / NAMESPACE_TOKEN_INVALID, FUNCTION_NAMESPACE_CONFLICT,
// FUNCTION_PREFIX_CONFLICT, RESERVED_FUNCTION_ID (configuration:: and sandbox:: belong to the
// engine; engine:: too, except ids it does not serve itself registered in default by a
// connection outside a gated session, as iii's console and queue workers do), and, for a registerfunction with an invocation (an HTTP-invoked function, httpfn.go),
// HTTP_INVOCATION_INVALID, HTTP_URL_REFUSED, HTTP_SECRET_REFUSED and HTTP_AUTH_UNRESOLVED.
//
// Project tokens: a namespace listed in config.yaml's namespaces: admits registrations only from
// connections whose handshake carried "Authorization: Bearer <token>" matching its token_file
// (read on every check, compared in constant time, never logged or returned). A connection whose
// token matches a namespace marked owner may call the owner-only functions.
//
// Protected functions (trust.go): a worker that connected with a token may register a function
// with "protected": true (Go SDK: protocol.Protected()); a worker without one is refused
// NAMESPACE_TOKEN_REQUIRED. The engine then forwards a call to it only from a connection that
// presented the same token, or a token accepted (token_file or owner_token_file) by a
// token-protected namespace that also accepts the registering worker's token; anyone else gets
// FORBIDDEN naming the function, its namespace, its worker and where `iii call` finds a token
// (TokenLookupHint). This works in every namespace, default included (which cannot be
// token-protected): the protection is the registering worker's own token. Compose registers
// compose::* this way, so only holders of the project token (its workers, and the user who
// runs it through ~/.iii/compose/tokens/) or of its owner token drive a project. Unprotected
// functions stay callable by every connection, as before. The engine's own calls (the sandbox
// router's, Invoke, Relay and a routed built-in's Route, route.go) are not checked; a gated
// listener checks the caller's right to the built-in's id before any of them.
//
// Claimed prefixes (ClaimPrefix, used by the sandbox router for "<adapter>::" in the bound
// namespace): every function under the prefix comes from one live connection; another's
// registration there is refused FUNCTION_PREFIX_CONFLICT. On an engine with token-protected
// namespaces the prefix also needs one of their tokens when its namespace is unprotected.
//
// Triggers: registertriggertype, registertrigger, unregistertrigger and
// triggerregistrationresult go to the registry of package triggers (triggers.go), which
// forwards each trigger to the provider of its type; 0.26 observe frames are answered
// UNSUPPORTED (no features are advertised).
//
// Observers (observers.go, package observe): engine::observers::add|remove|list; route opens
// the watch of each call whose function has observers, and they fire as the call
// ends. A session of a gated listener observes only the calls it makes itself.
//
// Stream channels (iii's engine::channels::*, their table package channels, glued in
// channels.go and clusterchannels.go) are one-way byte pipes between the holders of
// two StreamChannelRefs {channel_id, access_key, direction: "read"|"write"}, made by
// engine::channels::create {buffer_size?} -> {channel_id, reader, writer}. Each end connects once
// with a WebSocket to /ws/channels/{channel_id}?key={access_key} on the worker listener; the key
// (compared in constant time) says which end it is. Unknown or forgotten channel: HTTP 404; wrong
// key: 403; an end already connected: 409. The writer sends binary or text frames of at most
// protocol.MaxChannelFrame bytes; the reader gets them in order, each with its opcode (iii's SDKs
// read text frames as messages and binary ones as the byte stream). At most
// buffer_size frames (default DefaultChannelBuffer, at most MaxChannelBuffer) and
// Options.ChannelBytes wait between the two, and all channels together hold at most
// Options.ChannelBudget; the buffer grows as frames come. A full buffer stops reading the
// writer's socket (back-pressure). The engine holds at most Options.MaxChannels channels
// (CHANNEL_LIMIT), one connection at most Options.ChannelShare of them, a session of a gated
// listener a sixteenth and all sessions together the rest of the table less one share, so
// that no client takes it from trusted workers. The writer closing with
// status 1000 ends the reader's stream with a 1000 close after the buffered frames. Anything else
// (the writer closing with another status or dropping, an over-size frame, the reader leaving
// early, the idle deadline, engine shutdown) aborts the channel: the reader gets the frames
// already buffered, then each connected end is closed with protocol.ChannelAbortStatus (4000)
// and the reason as close text; an end that connects after the abort is closed with it at once.
// A channel is forgotten when both ends are done, when engine::channels::remove names it with
// the key of either end (it is aborted; the http worker removes a request's channels once its
// response is done, as iii's does), once nothing moved through it for Options.ChannelIdle
// (default 5 min) while an end is not connected, or when an end has not connected within
// Options.ChannelAttach of its creation (default 30 s), which bounds how long a channel aborted
// before its reader connected keeps its buffered frames.
//
// Handshakes (engine and channel endpoints alike): a request with an Origin header (a browser
// page) must be same-origin or match the listener's AllowedOrigins (Options.AllowedOrigins for
// the main one), else HTTP 403 ORIGIN_FORBIDDEN; on a loopback listener the Host must be a
// loopback name or address, else 403 HOST_FORBIDDEN (DNS rebinding). SDKs and workers send no
// Origin. A socket that has not sent its upgrade request within the listener's
// HandshakeTimeout is closed.
//
// Listeners (listener.go): ServeAll serves several, each a Listener with its own Origin rules
// and handshake deadline; Serve serves the main one. A listener with a Middleware or an RBAC
// gate (package rbac) gives each connection a session: the auth function's answer, fail closed
// (AUTH_ERROR error frame, then close 1008). A session's calls outside its rights are
// FORBIDDEN, engine::functions::list shows it only what it may call, its registrations pass
// the hooks and carry its function_registration_prefix, and its calls to non-engine functions
// go to the middleware. Connections of ungated listeners are not affected by any session.
//
// Limits (limits.go; README.md "Limits"): every connection has one writer goroutine draining a
// bounded queue with a write deadline, writing every frame queued at once with one socket write
// (internal/batchconn), so forwarding to a worker never blocks the caller's read
// loop, and a peer that does not read is closed (SLOW_CONSUMER). Frames being read count
// against an engine-wide budget (FRAME_BUDGET_EXCEEDED). A connection runs at most
// Options.MaxInflight engine-served calls (TOO_MANY_CALLS) and must register within
// Options.RegisterTimeout (REGISTRATION_TIMEOUT). Every forwarded call has a timeout, at most
// Options.MaxCallTimeout; when its caller disconnects, its calls are forgotten (the protocol has
// no cancel frame, so the worker is not told; its late reply is dropped). action enqueue goes to
// the queue worker's queue::enqueue (enqueue.go), and fails enqueue_error when none is there.
package core
