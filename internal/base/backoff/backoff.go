// Package backoff is the one retry schedule of every module: exponential delays, capped, with
// full jitter for callers that must not retry in step with their peers.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff is a delay schedule: the retry after the first failure waits up to Initial, each
// consecutive one up to twice as long as the one before, never more than Max. A thing that
// stayed up for ResetAfter starts the schedule again.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

// Delay is the longest wait before the retry that follows the n-th consecutive failure (n >= 1).
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

// Jitter is Delay(n) with full jitter: a wait drawn uniformly from [0, Delay(n)], so that
// clients that lost the same server at the same instant do not come back at the same instant.
func (b Backoff) Jitter(n int) time.Duration {
	d := b.Delay(n)
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// Failures returns the consecutive-failure count after one more failure: prev+1, or 1 when the
// thing had been up (since upSince) for at least ResetAfter.
func (b Backoff) Failures(prev int, upSince, failedAt time.Time) int {
	if !upSince.IsZero() && failedAt.Sub(upSince) >= b.ResetAfter {
		return 1
	}
	return prev + 1
}
