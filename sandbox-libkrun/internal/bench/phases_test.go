package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
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

// streamingMachine is a machine that streams files.
type streamingMachine struct {
	vm.Machine
	vm.FSStreamer
}

func TestTimedKeepsFSStreamer(t *testing.T) {
	var mu sync.Mutex
	if _, ok := timed(streamingMachine{}, &mu, &runTimes{}).(vm.FSStreamer); !ok {
		t.Fatal("timed hid vm.FSStreamer: the fs section's fs::read and fs::write would answer S219")
	}
	if _, ok := timed(timedMachine{}, &mu, &runTimes{}).(vm.FSStreamer); ok {
		t.Fatal("timed claimed vm.FSStreamer for a machine without it")
	}
}
