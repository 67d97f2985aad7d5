package core

import (
	"fmt"
	"sync"
)

// budget is the engine-wide byte budget of the frames being read. A connection takes from it
// as its frames' bytes arrive and keeps what its reused read buffer holds; it may hold at most
// share. When a take would pass the limit, the connection holding the most gives way: it is
// evicted (closed), and what it held counts as given back at once, unless the one asking holds
// the most, which is then refused.
type budget struct {
	limit, share int64

	mu      sync.Mutex
	used    int64
	holders map[*holder]struct{} // those holding something
}

// holder is one connection's part of the budget.
type holder struct {
	held    int64  // guarded by budget.mu
	evicted bool   // the budget took back what it held: it gets nothing more
	refused string // why the last take failed
	evict   func() // closes the connection, called once, on a goroutine of its own
}

// take reserves n more bytes for h, or reports false (reserving nothing).
func (b *budget) take(h *holder, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case h.evicted:
		h.refused = "this connection was closed to make room for others"
		return false
	case h.held+n > b.share:
		h.refused = fmt.Sprintf("this connection would be reading %d KiB of frames, past its share of %d KiB", (h.held+n)>>10, b.share>>10)
		return false
	}
	for b.used+n > b.limit {
		var big *holder
		for o := range b.holders {
			if o != h && (big == nil || o.held > big.held) {
				big = o
			}
		}
		if big == nil || big.held <= h.held+n {
			h.refused = fmt.Sprintf("the engine's %d MiB frame budget is spent and this connection holds the most", b.limit>>20)
			return false
		}
		b.used -= big.held
		big.held, big.evicted = 0, true
		delete(b.holders, big)
		go big.evict()
	}
	if b.holders == nil {
		b.holders = map[*holder]struct{}{}
	}
	b.holders[h] = struct{}{}
	h.held += n
	b.used += n
	return true
}

// keep gives back what h holds beyond n bytes.
func (b *budget) keep(h *holder, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.evicted || h.held <= n {
		return
	}
	b.used -= h.held - n
	h.held = n
	if n == 0 {
		delete(b.holders, h)
	}
}

// inUse is how many bytes are held.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
