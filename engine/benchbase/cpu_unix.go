//go:build unix

package benchbase

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time (user + system) this process has used.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
