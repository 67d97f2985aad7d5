//go:build !unix

package benchbase

import "time"

// CPUTime is not measured here; calls per CPU-second then read as +Inf.
func CPUTime() time.Duration { return 0 }
