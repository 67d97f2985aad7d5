package poll

import (
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	if !Until(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Until stopped after %d looks, want 3", n)
	}
	looks := 0
	start := time.Now()
	if Until(3*Tick, func() bool { looks++; return false }) {
		t.Fatal("Until reported a condition that never held")
	}
	if time.Since(start) < 3*Tick || looks < 2 {
		t.Fatalf("Until gave up after %v and %d looks, want at least %v and a look at the deadline", time.Since(start), looks, 3*Tick)
	}
}
