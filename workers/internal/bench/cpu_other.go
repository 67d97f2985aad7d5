//go:build !unix

package main

import "time"

// cpuTime is not measured here; calls per CPU-second then read as +Inf.
func cpuTime() time.Duration { return 0 }
