package main

import (
	"go/parser"
	"go/token"
	"testing"
)

// TestDeadlineLoopsArePolls: a loop on a deadline counts when it sleeps between looks, whether
// the deadline is in its condition or in an if of its body; one that blocks on reads until the
// deadline, or checks that a condition holds all along, does not.
func TestDeadlineLoopsArePolls(t *testing.T) {
	const src = `package p

func counted() {
	deadline := time.Now().Add(time.Second)
	for !ready() {
		if time.Now().After(deadline) {
			panic("late")
		}
		time.Sleep(time.Millisecond)
	}
	for time.Now().Before(deadline) {
		if ready() {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func notCounted(sub *nats.Subscription) {
	deadline := time.Now().Add(time.Second)
	var got *nats.Msg
	for got == nil && time.Now().Before(deadline) {
		got, _ = sub.NextMsg(50 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		if !ready() {
			panic("not ready")
		}
	}
	for i := 0; i < 3; i++ {
		time.Sleep(time.Millisecond)
	}
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p_test.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	k := &testKit{}
	k.inspect(fset, "p_test.go", f)
	want := []string{"p_test.go:5:2", "p_test.go:11:2"}
	if len(k.loops) != len(want) || k.loops[0] != want[0] || k.loops[1] != want[1] {
		t.Fatalf("loops counted %v, want %v", k.loops, want)
	}
}
