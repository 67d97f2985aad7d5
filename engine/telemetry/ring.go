package telemetry

import (
	"sync"
	"time"
)

// ring keeps the newest records within a count and a byte bound (each record's size is an
// estimate, see the size functions) and a retention age: adding past a bound drops the oldest
// first. It is a circular buffer of pointers, so a steady stream of adds moves no records and
// its slots cost 8 bytes each. It is safe for concurrent use.
type ring[T any] struct {
	mu       sync.Mutex
	buf      []*entry[T]
	start, n int
	bytes    int
	maxCount int
	maxBytes int
	maxAge   time.Duration // 0: none
	dropped  uint64        // records dropped to stay within the bounds
}

type entry[T any] struct {
	v    T
	size int
	at   time.Time
}

func newRing[T any](maxCount, maxBytes int, maxAge time.Duration) *ring[T] {
	return &ring[T]{maxCount: maxCount, maxBytes: maxBytes, maxAge: maxAge}
}

// add keeps v, of estimated size bytes. A record larger than the byte bound is not kept.
func (r *ring[T]) add(v T, size int, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if size > r.maxBytes {
		r.dropped++
		return
	}
	r.expire(now)
	for r.n > 0 && (r.n+1 > r.maxCount || r.bytes+size > r.maxBytes) {
		r.popOldest()
		r.dropped++
	}
	if r.n == len(r.buf) {
		grown := make([]*entry[T], max(16, 2*len(r.buf)))
		for i := range r.n {
			grown[i] = r.buf[(r.start+i)%len(r.buf)]
		}
		r.buf, r.start = grown, 0
	}
	r.buf[(r.start+r.n)%len(r.buf)] = &entry[T]{v: v, size: size, at: now}
	r.n++
	r.bytes += size
}

func (r *ring[T]) popOldest() {
	r.bytes -= r.buf[r.start].size
	r.buf[r.start] = nil
	r.start = (r.start + 1) % len(r.buf)
	r.n--
}

// expire drops the records older than the retention age.
func (r *ring[T]) expire(now time.Time) {
	if r.maxAge <= 0 {
		return
	}
	for r.n > 0 && now.Sub(r.buf[r.start].at) > r.maxAge {
		r.popOldest()
	}
}

// snapshot returns the kept records, oldest first.
func (r *ring[T]) snapshot(now time.Time) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	out := make([]T, 0, r.n)
	for i := range r.n {
		out = append(out, r.buf[(r.start+i)%len(r.buf)].v)
	}
	return out
}

func (r *ring[T]) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf, r.start, r.n, r.bytes = nil, 0, 0, 0
}

// stats reports the kept count and bytes and how many records were dropped.
func (r *ring[T]) stats() (count, bytes int, dropped uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.bytes, r.dropped
}
