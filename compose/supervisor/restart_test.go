package supervisor

import (
	"testing"
	"time"
)

// TestDefaultBackoff: Compose restarts after 500ms, doubling up to 30s.
func TestDefaultBackoff(t *testing.T) {
	if DefaultBackoff.Delay(1) != 500*time.Millisecond || DefaultBackoff.Delay(2) != time.Second || DefaultBackoff.Delay(100) != 30*time.Second {
		t.Errorf("default schedule %v, %v … %v", DefaultBackoff.Delay(1), DefaultBackoff.Delay(2), DefaultBackoff.Delay(100))
	}
}
