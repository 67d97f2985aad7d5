package protocol

import (
	"sync"
	"sync/atomic"
	"time"
)

// pendingShards is how many locks the calls a Worker awaits are spread over.
const pendingShards = 16

// sweepEvery is how often the calls past their deadline are settled while any call is pending.
var sweepEvery = 50 * time.Millisecond

// callExpired is what a call receives when its deadline passed before any reply.
var callExpired = &Message{}

// pendingCalls holds the calls a Worker awaits, by invocation id. The table is sharded, so
// concurrent callers and the read loop rarely meet on one lock, and one sweeper goroutine (running
// only while calls are pending) settles the calls past their deadline or whose context ended,
// within sweepEvery: a call then needs no timer, no clock reading and no select of its own.
//
// Whoever removes an entry (the reply, the sweeper, a lost connection) sends its one outcome on
// the entry's channel; a caller that gives up removes the entry itself and sends nothing.
// Nothing every call writes is shared between shards: a call reads ticks and sweeping, which
// change once per sweep at most.
type pendingCalls struct {
	shards   [pendingShards]pendingShard
	ticks    atomic.Uint64 // sweeps so far: the table's clock, in units of sweepEvery
	sweeping atomic.Bool   // a sweeper goroutine runs
}

type pendingShard struct {
	mu sync.Mutex
	m  map[string]*pendingCall
	_  [48]byte // a shard fills its own 64-byte cache line
}

// pendingCall is one awaited call.
type pendingCall struct {
	ch   chan *Message   // buffered: the one settling send never blocks
	due  uint64          // the sweep (ticks) after which the call is expired
	done <-chan struct{} // the caller's context's Done channel, nil if it has none
}

var pendingPool = sync.Pool{New: func() any { return &pendingCall{ch: make(chan *Message, 1)} }}

// shard picks id's shard by its last byte: invocation ids end in a counter digit.
func (p *pendingCalls) shard(id string) *pendingShard {
	if id == "" {
		return &p.shards[0]
	}
	return &p.shards[id[len(id)-1]%pendingShards]
}

// add registers the call id, to expire after timeout or when done closes.
func (p *pendingCalls) add(id string, timeout time.Duration, done <-chan struct{}) *pendingCall {
	pc := pendingPool.Get().(*pendingCall)
	timeout = max(timeout, 0)
	// One sweep more than the timeout spans: the current sweep interval has partly passed.
	pc.due = p.ticks.Load() + uint64(timeout/sweepEvery) + 1
	pc.done = done
	s := p.shard(id)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*pendingCall{}
	}
	s.m[id] = pc
	s.mu.Unlock()
	if !p.sweeping.Load() && p.sweeping.CompareAndSwap(false, true) {
		go p.sweep()
	}
	return pc
}

// take removes the call id and returns it, nil when it is no longer pending.
func (p *pendingCalls) take(id string) *pendingCall {
	s := p.shard(id)
	s.mu.Lock()
	pc := s.m[id]
	if pc != nil {
		delete(s.m, id)
	}
	s.mu.Unlock()
	return pc
}

// settle delivers m (nil: the connection was lost) to the call id, if it is still pending.
func (p *pendingCalls) settle(id string, m *Message) bool {
	pc := p.take(id)
	if pc == nil {
		return false
	}
	pc.ch <- m
	return true
}

// release gives back a call whose outcome its caller received: nothing refers to it any more.
func (p *pendingCalls) release(pc *pendingCall) {
	pc.done = nil
	pendingPool.Put(pc)
}

// settleAll delivers nil (connection lost) to every pending call.
func (p *pendingCalls) settleAll() {
	p.settleIf(func(*pendingCall) bool { return true }, nil)
}

// settleIf removes every call for which match holds and delivers m to it.
func (p *pendingCalls) settleIf(match func(*pendingCall) bool, m *Message) {
	for i := range p.shards {
		s := &p.shards[i]
		var out []*pendingCall
		s.mu.Lock()
		for id, pc := range s.m {
			if match(pc) {
				delete(s.m, id)
				out = append(out, pc)
			}
		}
		s.mu.Unlock()
		for _, pc := range out {
			pc.ch <- m
		}
	}
}

// expired reports whether pc is past its deadline at sweep now, or its context ended.
func (pc *pendingCall) expired(now uint64) bool {
	if now > pc.due {
		return true
	}
	select {
	case <-pc.done:
		return true
	default:
		return false
	}
}

// sweep settles the calls past their deadline or whose context ended with callExpired, every
// sweepEvery, until no call is pending: every call has a deadline, so the sweeper never outlives
// the calls.
func (p *pendingCalls) sweep() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for range t.C {
		now := p.ticks.Add(1)
		p.settleIf(func(pc *pendingCall) bool { return pc.expired(now) }, callExpired)
		if p.len() > 0 {
			continue
		}
		p.sweeping.Store(false)
		// A call added after the table was found empty but before the flag was cleared saw the
		// flag set and started no sweeper: this one carries on for it.
		if p.len() == 0 || !p.sweeping.CompareAndSwap(false, true) {
			return
		}
	}
}

// len counts the pending calls.
func (p *pendingCalls) len() int {
	n := 0
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
