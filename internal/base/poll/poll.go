// Package poll waits for a condition with a deadline instead of a sleep: the one wait of the
// tests (engine/enginetest re-exports it) and of the packages below the test kit, which cannot
// import it.
package poll

import "time"

// Tick is how long Until waits between two looks at its condition.
const Tick = 10 * time.Millisecond

// Until reports whether cond held within timeout, looking every Tick. cond is always tried at
// least once, and once more at the deadline.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(Tick, left))
	}
}
