package main

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range v {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	s := summarize(ms(5, 1, 4, 2, 3, 10, 9, 8, 7, 6))
	if s.Median != 5500*time.Microsecond || s.P90 != 9*time.Millisecond || s.N != 10 {
		t.Fatalf("got %+v", s)
	}
	if s := summarize(ms(3, 1, 2)); s.Median != 2*time.Millisecond || s.P90 != 3*time.Millisecond {
		t.Fatalf("odd: %+v", s)
	}
	if s := summarize(nil); s.N != 0 {
		t.Fatalf("empty: %+v", s)
	}
}
