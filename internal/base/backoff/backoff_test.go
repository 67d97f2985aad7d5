package backoff

import (
	"testing"
	"time"
)

func TestBackoffSchedule(t *testing.T) {
	b := Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, ResetAfter: time.Minute}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := b.Delay(i + 1); got != w {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := b.Delay(0); got != b.Initial {
		t.Errorf("Delay(0) = %v", got)
	}
	if got := b.Delay(1000); got != b.Max {
		t.Errorf("Delay(1000) = %v (overflow?)", got)
	}
}

func TestBackoffReset(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Minute, ResetAfter: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	if n := b.Failures(3, t0, t0.Add(9*time.Second)); n != 4 {
		t.Errorf("a short run counts on: %d", n)
	}
	if n := b.Failures(3, t0, t0.Add(10*time.Second)); n != 1 {
		t.Errorf("a healthy run resets the schedule: %d", n)
	}
	if n := b.Failures(0, time.Time{}, t0); n != 1 {
		t.Errorf("first failure: %d", n)
	}
}

// TestJitterSpreadsOverTheWholeDelay: every jittered wait lies in [0, Delay(n)], and a few
// hundred draws cover both halves of it, so peers do not retry in step.
func TestJitterSpreadsOverTheWholeDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for _, n := range []int{1, 3, 10} {
		low, high := 0, 0
		for range 400 {
			d := b.Jitter(n)
			if d < 0 || d > b.Delay(n) {
				t.Fatalf("Jitter(%d) = %v, outside [0, %v]", n, d, b.Delay(n))
			}
			if d < b.Delay(n)/2 {
				low++
			} else {
				high++
			}
		}
		if low < 100 || high < 100 {
			t.Errorf("Jitter(%d): %d draws below half the delay, %d above", n, low, high)
		}
	}
	if d := (Backoff{}).Jitter(3); d != 0 {
		t.Errorf("a zero schedule waits %v", d)
	}
}
