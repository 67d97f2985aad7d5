package project

import (
	"context"
	"slices"
	"strconv"
	"sync"

	"github.com/iii-go/iii/compose/composefile"
)

// MaxParallelStarts is how many containers Compose starts at once by default: containers whose
// start_after dependencies are ready start side by side, at most this many at a time, so that a
// large project does not start everything at the same instant.
const MaxParallelStarts = 4

// EnvMaxParallelStarts overrides MaxParallelStarts (a whole number, at least 1).
const EnvMaxParallelStarts = "III_COMPOSE_MAX_PARALLEL_STARTS"

// parallelStarts is MaxParallelStarts, or v ($III_COMPOSE_MAX_PARALLEL_STARTS) when that is valid.
func parallelStarts(v string) int {
	if n, err := strconv.Atoi(v); err == nil && n >= 1 {
		return n
	}
	return MaxParallelStarts
}

// startDeps are the containers among keys each one waits for: its start_after, and the adapter
// for a VM worker (it boots through it).
func (p *Project) startDeps(f *composefile.File, keys []string) map[string][]string {
	in := map[string]bool{}
	for _, k := range keys {
		in[k] = true
	}
	ak := AdapterKey(f)
	deps := map[string][]string{}
	for _, k := range keys {
		for _, d := range f.Containers[k].StartAfter {
			if in[d] {
				deps[k] = append(deps[k], d)
			}
		}
		if ak != "" && k != ak && in[ak] && p.IsVM(k) && !slices.Contains(deps[k], ak) {
			deps[k] = append(deps[k], ak)
		}
	}
	return deps
}

// scheduled is the outcome of one container in schedule.
type scheduled struct {
	err     error
	skipped bool // not started: an earlier failure stopped the schedule
}

// schedule runs start for every key once its deps have finished, at most limit at a time.
// A key whose start fails stops the schedule unless tolerated says the failure is tolerated
// (required: false): keys not yet started are then skipped, the ones in flight finish. It
// returns each key's outcome and the keys that started, in the order they finished.
func schedule(ctx context.Context, keys []string, deps map[string][]string, limit int,
	start func(ctx context.Context, key string) error, tolerated func(key string, err error) bool) (map[string]scheduled, []string) {
	out := map[string]scheduled{}
	var started []string
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	done := map[string]bool{}
	launched := map[string]bool{}
	stopped := false
	running := 0
	mu.Lock()
	defer mu.Unlock()
	for {
		progress := false
		for _, k := range keys {
			if launched[k] || stopped || running >= limit {
				continue
			}
			ready := true
			for _, d := range deps[k] {
				ready = ready && done[d]
			}
			if !ready {
				continue
			}
			launched[k], progress = true, true
			running++
			go func(k string) {
				err := start(ctx, k)
				mu.Lock()
				defer mu.Unlock()
				running--
				done[k] = true
				out[k] = scheduled{err: err}
				if err == nil {
					started = append(started, k)
				} else if !tolerated(k, err) {
					stopped = true
				}
				cond.Broadcast()
			}(k)
		}
		if len(launched) == len(keys) || stopped {
			for running > 0 {
				cond.Wait()
			}
			if !stopped && len(done) < len(keys) {
				continue
			}
			break
		}
		if !progress {
			if running == 0 {
				break // nothing can start any more (cannot happen with an acyclic start_after)
			}
			cond.Wait()
		}
	}
	for _, k := range keys {
		if !launched[k] {
			out[k] = scheduled{skipped: true}
		}
	}
	return out, started
}
