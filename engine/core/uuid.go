package core

import "github.com/google/uuid"

// newUUID returns a random (version 4) UUID string. Every id the engine makes and sends (worker
// ids, reattach tokens, invocation ids, channel ids) is one: iii's SDKs decode them as UUIDs and
// drop a frame whose id is not.
func newUUID() string { return uuid.NewString() }
