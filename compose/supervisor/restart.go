package supervisor

import "time"

// Backoff is the delay schedule of a restart policy: the first restart after a failure waits
// Initial, each consecutive one twice as long as the one before, never more than Max. A worker
// that stayed up for ResetAfter starts the schedule again.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

// DefaultBackoff is Compose's restart schedule: 500ms, 1s, 2s, 4s … 30s at most, reset after a
// worker stayed ready for 30s.
var DefaultBackoff = Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, ResetAfter: 30 * time.Second}

// Delay is the wait before the restart that follows the n-th consecutive failure (n >= 1).
func (b Backoff) Delay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := b.Initial
	for i := 1; i < n; i++ {
		if d >= b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	return min(d, b.Max)
}

// Failures returns the consecutive-failure count after one more exit: prev+1, or 1 when the
// worker had been up (since upSince) for at least ResetAfter.
func (b Backoff) Failures(prev int, upSince, exitedAt time.Time) int {
	if !upSince.IsZero() && exitedAt.Sub(upSince) >= b.ResetAfter {
		return 1
	}
	return prev + 1
}
