package observability

import (
	"sync"
	"time"
)

// ring keeps the newest records within a count and a byte bound (each record's size is an
// estimate, see the size functions) and a retention age: adding past a bound drops the oldest
// first. It is safe for concurrent use.
type ring[T any] struct {
	mu       sync.Mutex
	items    []entry[T] // oldest first, from head
	head     int
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
	r.items = append(r.items, entry[T]{v: v, size: size, at: now})
	r.bytes += size
	r.expire(now)
	for r.len() > r.maxCount || r.bytes > r.maxBytes {
		r.popOldest()
		r.dropped++
	}
	// Compact once the dropped prefix is as large as what is kept, so the backing array stays
	// within twice the kept records.
	if r.head > 0 && r.head >= len(r.items)-r.head {
		n := copy(r.items, r.items[r.head:])
		clear(r.items[n:])
		r.items = r.items[:n]
		r.head = 0
	}
}

func (r *ring[T]) len() int { return len(r.items) - r.head }

func (r *ring[T]) popOldest() {
	e := &r.items[r.head]
	r.bytes -= e.size
	*e = entry[T]{}
	r.head++
}

// expire drops the records older than the retention age.
func (r *ring[T]) expire(now time.Time) {
	if r.maxAge <= 0 {
		return
	}
	for r.len() > 0 && now.Sub(r.items[r.head].at) > r.maxAge {
		r.popOldest()
	}
}

// snapshot returns the kept records, oldest first.
func (r *ring[T]) snapshot(now time.Time) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	out := make([]T, 0, r.len())
	for _, e := range r.items[r.head:] {
		out = append(out, e.v)
	}
	return out
}

func (r *ring[T]) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items, r.head, r.bytes = nil, 0, 0
}

// stats reports the kept count and bytes and how many records were dropped.
func (r *ring[T]) stats() (count, bytes int, dropped uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.len(), r.bytes, r.dropped
}
