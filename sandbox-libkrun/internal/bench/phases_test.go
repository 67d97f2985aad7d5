package main

import (
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

func TestBreakdown(t *testing.T) {
	var b Breakdown
	for _, v := range []int{30, 10, 20} {
		b.Add([]qemu.Phase{{Name: "a", D: time.Duration(v) * time.Millisecond}, {Name: "b", D: time.Duration(2*v) * time.Millisecond}})
	}
	med := b.Medians()
	if len(med) != 2 || med[0].Name != "a" || med[0].D != 20*time.Millisecond || med[1].D != 40*time.Millisecond {
		t.Fatalf("medians %+v", med)
	}
	var out strings.Builder
	b.Print(&out, "x")
	if got := out.String(); got != "  phases of x (medians, ms; sum 60): a 20 | b 40\n" {
		t.Fatalf("printed %q", got)
	}
}

// A run's phases add up to its total: the adapter's time before the boot, the boot's phases, the
// file writes, the exec and the rest.
func TestRunPhasesAddUp(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rt := &runTimes{bootCalled: t0.Add(3 * time.Millisecond), fs: 9 * time.Millisecond, exec: 80 * time.Millisecond}
	ph := runPhases(t0, 100*time.Millisecond, rt)
	var sum time.Duration
	for _, p := range ph {
		sum += p.D
	}
	if sum != 100*time.Millisecond || ph[0].D != 3*time.Millisecond || ph[len(ph)-1].Name != "reply" || ph[len(ph)-1].D != 8*time.Millisecond {
		t.Fatalf("phases %+v (sum %s)", ph, sum)
	}
}
