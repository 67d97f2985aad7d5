package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// Stats summarises a series of timings.
type Stats struct {
	N      int
	Median time.Duration
	P90    time.Duration
}

// String renders the median and p90 in milliseconds.
func (s Stats) String() string {
	return fmt.Sprintf("median %s  p90 %s  (n=%d)", s.Median.Round(time.Millisecond), s.P90.Round(time.Millisecond), s.N)
}

// summarize computes the median and the 90th percentile (nearest rank) of ds.
func summarize(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	rank := (9*len(s) + 9) / 10 // ceil(0.9 n)
	return Stats{N: len(s), Median: med, P90: s[rank-1]}
}

// sandboxMemoryMB is the RAM of a sandbox created with the adapter's defaults; the floor and the
// driver's machines get the same, so that every ratio compares machines of one size.
var sandboxMemoryMB = int(settings.Defaults().DefaultMemoryMB)

// measureFloor boots the firmware's kernel and initramfs n times with an /init that powers off at
// once (a VM running `true`, with sandboxMemoryMB of RAM) and summarises the wall time from starting qemu to its exit, with
// its phases: the kernel from its clock's start to /init, and the rest (qemu's start, the
// kernel's earliest boot before its clock runs, and the power-off).
func measureFloor(ctx context.Context, d *qemu.Driver, n int) (Stats, Breakdown, error) {
	var ds []time.Duration
	var b Breakdown
	for i := 0; i < n; i++ {
		dur, toInit, err := d.FloorBoot(ctx, sandboxMemoryMB)
		if err != nil {
			return Stats{}, b, err
		}
		ds = append(ds, dur)
		b.Add([]qemu.Phase{{Name: "kernel to /init", D: toInit}, {Name: "qemu + early kernel + power-off", D: dur - toInit}})
	}
	return summarize(ds), b, nil
}
