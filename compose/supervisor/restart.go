package supervisor

import (
	"time"

	"github.com/iii-go/iii/internal/base/backoff"
)

// Backoff is the delay schedule of a restart policy (the one schedule of every module,
// internal/base/backoff): the first restart after a failure waits Initial, each consecutive one twice
// as long as the one before, never more than Max. A worker that stayed up for ResetAfter starts
// the schedule again. Compose waits the schedule's Delay, unjittered: its restarts are local,
// and it prints each wait.
type Backoff = backoff.Backoff

// DefaultBackoff is Compose's restart schedule: 500ms, 1s, 2s, 4s … 30s at most, reset after a
// worker stayed ready for 30s.
var DefaultBackoff = Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, ResetAfter: 30 * time.Second}
