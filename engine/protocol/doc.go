// Package protocol is the iii worker wire protocol (JSON frames over WebSocket, compatible with
// the Node package iii-sdk@0.22.x) and a Go worker SDK built on it.
//
// A worker connects, registers functions, serves invocations concurrently and calls functions:
//
//	w := protocol.NewWorker(protocol.Config{}.FromEnv(os.Getenv)) // URL, namespace, name, token from the env
//	w.Register("math::add", func(ctx context.Context, in json.RawMessage) (any, error) { ... })
//	if err := w.Start(ctx); err != nil { ... }             // returns once the engine accepted it
//	out, err := w.Call(ctx, "math::add", map[string]int{"a": 1, "b": 2})
//	w.Close()
//
// Config.FromEnv reads the variables iii's SDKs read, from the environment the worker's main
// hands it: III_URL (default ws://127.0.0.1:49134), III_NAMESPACE (default "default"),
// III_WORKER_NAME, III_TOKEN_FILE, III_TOKEN (when no token file); a Config used without it
// reads none. A
// ws:// or wss:// engine that is not on loopback is reached through the HTTP proxy that
// HTTP_PROXY, HTTPS_PROXY and NO_PROXY name for it, as net/http does (a CONNECT tunnel).
//
// Handshake. On open the SDK sends every registerfunction it holds, then calls
// engine::workers::register synchronously with {runtime, version, name, description, os, pid,
// namespace}. The engine parks registrations that arrive before that call and applies them in
// the worker's namespace when it arrives, so when Start returns every function is live. After a
// lost connection the SDK reconnects with backoff (a random wait below 100 ms doubling to 5 s,
// so the workers of a restarted engine spread out) and registers again; it pings the engine
// every 20 s and treats an unanswered ping as a lost connection.
//
// Project tokens. A namespace may be token-protected by the engine's config.yaml. A worker
// registering into it must present the token: the SDK reads it from the file named by
// Config.TokenFile (default $III_TOKEN_FILE), or takes Config.Token (default $III_TOKEN, as 0.26
// SDKs do) when there is no file, and sends it in the WebSocket handshake as the
// HTTP header "Authorization: Bearer <token>". The token is never put in a frame, a log line or
// an error. A refused registration (NAMESPACE_TOKEN_REQUIRED, NAMESPACE_TOKEN_INVALID) makes
// Start fail, or Done close with that error after a reconnect; the SDK does not retry it.
//
// Calls. Call waits for the reply (default timeout 30 s, or the context deadline) and sends the
// timeout to the engine as timeout_ms, so the engine answers "timeout" itself; if even the engine
// stays silent, Call returns TIMEOUT. Calls to engine::*, configuration::* and sandbox::* go to
// the default namespace; other calls go to the worker's own namespace unless InNamespace is given.
// Function errors are *Error values whose Raw keeps every key of the body.
//
// Stream channels. CreateChannel calls engine::channels::create and returns the read and write
// ChannelRef ({channel_id, access_key, direction}) of a new channel; OpenWriter and OpenReader
// connect to one end over a WebSocket to <engine>/ws/channels/{channel_id}?key={access_key}
// (ws/wss derived from the worker URL; DialReader and DialWriter take any engine URL). Bytes flow
// writer to reader; the writer's Close ends the reader's stream with io.EOF, anything else
// (Abort, a dropped connection, the engine's idle deadline) closes the other end with
// ChannelAbortStatus and a reason, which the reader returns as a *ChannelAbortedError. The ctx
// given to OpenReader/OpenWriter bounds the whole stream. Refs are plain JSON, so a function can
// return one and its caller open it. Write sends binary frames (the byte stream); SendMessage
// sends a text frame (a message, iii's sendMessage), which the engine passes on as text and a
// reader with ChannelReader.OnMessage callbacks gets there instead of in the stream, as iii's
// SDKs do (without a callback it stays in the stream).
//
// Frames. Code that speaks the protocol itself, such as a proxy between workers and the engine,
// reads and writes Message values with Decode and Encode. They are the engine's own codec
// (engine/internal/wire, whose Message documents every field and its JSON key), so both sides
// accept and produce the same frames.
package protocol
