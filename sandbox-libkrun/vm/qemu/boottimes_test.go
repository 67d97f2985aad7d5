package qemu

import (
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// The phases of a boot are consecutive: they add up to Boot's whole time, and the guest's own
// clock splits its part.
func TestBootPhases(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	bt := BootTimes{Start: t0, SharesReady: ms(10), QemuStarted: ms(12), Hello: ms(1312), Ready: ms(1370),
		Guest: proto.Hello{InitMS: 700, ModulesMS: 60, UptimeMS: 790}}
	want := map[string]time.Duration{"virtiofsd": 10, "qemu + early kernel": 512, "kernel to /init": 700,
		"modules": 60, "agent port + hello": 30, "mounts (Init)": 58}
	var sum time.Duration
	for _, p := range bt.Phases() {
		if p.D != want[p.Name]*time.Millisecond {
			t.Errorf("%s = %s, want %d ms", p.Name, p.D, want[p.Name])
		}
		sum += p.D
	}
	if sum != bt.Ready.Sub(bt.Start) {
		t.Fatalf("phases add up to %s, the boot took %s", sum, bt.Ready.Sub(bt.Start))
	}
}
