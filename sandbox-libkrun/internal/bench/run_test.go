package main

import (
	"strings"
	"testing"
	"time"
)

func TestVerdict(t *testing.T) {
	floor := Stats{N: 10, Median: time.Second, P90: time.Second}
	if v := verdict(Stats{Median: 1150 * time.Millisecond, P90: 1300 * time.Millisecond}, floor, 1.2); v != "1.15x floor (p90 1.30x), overhead +15%: meets the target (<= 1.20x)" {
		t.Fatal(v)
	}
	if v := verdict(Stats{Median: 1400 * time.Millisecond, P90: 1400 * time.Millisecond}, floor, 1.2); !strings.HasSuffix(v, "overhead +40%: MISSES the target (<= 1.20x)") {
		t.Fatal(v)
	}
	if v := verdict(Stats{Median: 1150 * time.Millisecond, P90: 1150 * time.Millisecond}, floor, 1.1); !strings.HasSuffix(v, "MISSES the target (<= 1.10x)") {
		t.Fatal(v)
	}
}
