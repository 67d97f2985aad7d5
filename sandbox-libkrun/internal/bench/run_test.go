package main

import (
	"strings"
	"testing"
	"time"
)

func TestVerdict(t *testing.T) {
	floor := Stats{N: 10, Median: time.Second, P90: time.Second}
	if v := verdict(Stats{Median: 1150 * time.Millisecond, P90: 1300 * time.Millisecond}, floor); v != "1.15x floor (p90 1.30x), overhead +15%: meets the target" {
		t.Fatal(v)
	}
	if v := verdict(Stats{Median: 1400 * time.Millisecond, P90: 1400 * time.Millisecond}, floor); !strings.HasSuffix(v, "overhead +40%: MISSES the target") {
		t.Fatal(v)
	}
}
