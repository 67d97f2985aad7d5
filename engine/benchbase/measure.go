package benchbase

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is one case's measurement: how many calls completed, in how much wall and CPU time,
// and their median and 99th-percentile latency.
type Result struct {
	Calls    int
	Elapsed  time.Duration
	CPU      time.Duration // CPU time of this process (user+system) while the case ran
	P50, P99 time.Duration
}

// Rate is calls per second.
func (r Result) Rate() float64 { return float64(r.Calls) / r.Elapsed.Seconds() }

// CPURate is calls per CPU-second of this process: steadier than Rate when other work shares
// the machine.
func (r Result) CPURate() float64 { return float64(r.Calls) / r.CPU.Seconds() }

// String formats one measurement line.
func (r Result) String() string {
	return fmt.Sprintf("%9.0f calls/s  p50 %8s  p99 %8s  (%6.0f calls per CPU-second)", r.Rate(), r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.CPURate())
}

// rounds is how many alternating slices Compare splits each case's time into.
const rounds = 8

// Compare measures every case in turn, in rounds slices of d/rounds each after a warm-up of
// d/10 per case, with conc concurrent loops of calls, so that load from elsewhere on the machine
// falls on all of them alike. It stops at the first failed call.
func Compare(conc int, d time.Duration, cases ...func() error) ([]Result, error) {
	for _, f := range cases {
		var warm Result
		if err := measure(&warm, nil, conc, d/10, f); err != nil {
			return nil, err
		}
	}
	res := make([]Result, len(cases))
	lats := make([][]time.Duration, len(cases))
	for range rounds {
		for i, f := range cases {
			if err := measure(&res[i], &lats[i], conc, d/rounds, f); err != nil {
				return nil, err
			}
		}
	}
	for i, l := range lats {
		slices.Sort(l)
		res[i].Calls = len(l)
		if len(l) > 0 {
			res[i].P50 = l[min(len(l)-1, len(l)/2)]
			res[i].P99 = l[min(len(l)-1, len(l)*99/100)]
		}
	}
	return res, nil
}

// measure runs conc loops of call for d and adds the time to r and the latencies to lats
// (dropped when lats is nil).
func measure(r *Result, lats *[]time.Duration, conc int, d time.Duration, call func() error) error {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errv atomic.Value
	)
	start, cpu0 := time.Now(), CPUTime()
	stop := start.Add(d)
	for range conc {
		wg.Go(func() {
			local := make([]time.Duration, 0, 1024)
			for time.Now().Before(stop) {
				t := time.Now()
				if err := call(); err != nil {
					errv.Store(err)
					return
				}
				local = append(local, time.Since(t))
			}
			if lats != nil {
				mu.Lock()
				*lats = append(*lats, local...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.Elapsed += time.Since(start)
	r.CPU += CPUTime() - cpu0
	if err, ok := errv.Load().(error); ok {
		return err
	}
	return nil
}
