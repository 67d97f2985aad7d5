// Package vmstate names and cleans up the adapter-owned state of Compose's VM workers.
//
// Each VM container gets a vm_id derived from the project's canonical directory, its state
// directory and the container key, so a moved or renamed project, or a changed
// III_COMPOSE_STATE_DIR, starts every VM fresh and leaves the old directories alone (req J6).
// The adapter keeps the state in ~/.iii/sandbox/workers/<vm_id>/; Compose deletes it through
// <prefix>::worker::delete when the container is removed (compose::remove, or dropped from the
// file), also after compose::down, which keeps it, by starting the declared adapter for that call
// (req J4); when it cannot, it warns with everything needed to delete it by hand (req J5). 0.25's
// <state dir>/vm/ is never read (req J1).
package vmstate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/iii-go/iii/internal/base/iiidir"
	"regexp"
	"strings"
)

// ID returns the vm_id of container in the project whose canonical directory is projectDir and
// whose state directory is stateDir: a readable prefix from the key and 16 hex digits.
func ID(projectDir, stateDir, container string) string {
	sum := sha256.Sum256([]byte(projectDir + "\x00" + stateDir + "\x00" + container))
	prefix := unsafe.ReplaceAllString(strings.ToLower(container), "-")
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	return prefix + "-" + hex.EncodeToString(sum[:8])
}

var unsafe = regexp.MustCompile(`[^a-z0-9_-]+`)

// Dir is where the adapter keeps a VM worker's state under home.
func Dir(home, vmID string) string {
	return iiidir.Under(home, iiidir.WorkersDir, vmID)
}

// Caller calls an engine function; the daemon's worker connection satisfies it.
type Caller interface {
	Call(ctx context.Context, fn string, payload any) (json.RawMessage, error)
}

// Delete asks the adapter with function prefix prefix to delete the state of vmID.
func Delete(ctx context.Context, c Caller, prefix, vmID string) error {
	_, err := c.Call(ctx, prefix+"::worker::delete", map[string]any{"vm_id": vmID})
	return err
}

// Warning is the message printed when the state of a VM container could not be deleted: it
// names the container, the adapter, the vm_id, why, and where the state stays.
func Warning(container, adapter, vmID, home, why string) string {
	return fmt.Sprintf("warning: could not delete the VM state of container '%s' through adapter '%s' (%s); "+
		"vm_id %s: its state stays in %s, delete it by hand", container, adapter, why, vmID, Dir(home, vmID))
}
