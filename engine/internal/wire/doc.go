// Package wire is the codec of iii's worker frames: the Message, Action and Error types, a
// decoder and an encoder without reflection, and what the engine's hot path needs beside them:
// DecodeBorrowed (raw fields left in the input), Own, Recycle (a pool of Messages) and
// AppendEncode (into a reused buffer).
//
// The public Go SDK, engine/protocol, re-exports the frame types, Decode and Encode; the rest
// is for the engine's packages only.
package wire
