package httpworker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/protocol"
)

// PoolChannels is the most channels a ChannelPool holds ahead of the requests: 32 requests'
// worth (two each), refilled once half are taken. That absorbs a burst of concurrent requests
// while holding 1.6% of the engine's default CHANNEL_LIMIT (4096), and every pooled channel
// is one the next requests take first, so the limit still bounds the requests' channels.
const PoolChannels = 64

// PoolMaxAge is the oldest a pooled channel is handed out: a channel whose ends have not both
// connected within the engine's attach deadline of its creation (30 s) is forgotten, so a
// handler still gets at least 20 s to connect one.
const PoolMaxAge = 10 * time.Second

// MaxPeerWaits is the most engine::channels::await_peer calls a pool has in flight: half the
// engine's per-connection limit of engine-served calls (256, TOO_MANY_CALLS past it), leaving
// the rest to the worker's other calls. A request past it connects its ends after attachGrace,
// as without a pool.
const MaxPeerWaits = 128

// errNoPeerWait is AwaitPeer's error when MaxPeerWaits calls are in flight.
var errNoPeerWait = errors.New("too many engine::channels::await_peer calls in flight")

// poolRetry is how long a pool waits after a failed refill (CHANNEL_LIMIT, a lost engine
// connection) before it tries again; meanwhile each request makes its own channels.
const poolRetry = time.Second

// removeDelay is how long a removed channel waits for others to be removed with it in one
// engine::channels::remove_many call.
const removeDelay = 2 * time.Millisecond

// ChannelPool is Channels through a worker's engine connection that keeps up to size channels
// made ahead of the requests, in the background and many in one engine::channels::create_many
// call, and removes the channels of finished requests in batches
// (engine::channels::remove_many) after their answers. A pooled channel is handed to one
// request only; when the pool is empty a request makes its own, as without a pool. Close
// removes what it still holds.
type ChannelPool struct {
	w      *protocol.Worker
	log    *slog.Logger
	size   int
	maxAge time.Duration

	waits chan struct{} // a slot per await_peer call in flight

	mu       sync.Mutex
	free     []pooledChannel // oldest first
	filling  bool
	failedAt time.Time
	doomed   []protocol.ChannelRef // to remove, in the next batch
	flushing bool
	closed   bool
	wg       sync.WaitGroup // the refill and the removal in progress
}

type pooledChannel struct {
	pair protocol.ChannelPair
	made time.Time
}

// NewChannelPool returns a pool on w holding up to size channels (at most
// protocol.MaxChannelsPerCall; size 0 is PoolChannels). It makes none before its first request.
func NewChannelPool(w *protocol.Worker, size int, log *slog.Logger) *ChannelPool {
	if size <= 0 {
		size = PoolChannels
	}
	return &ChannelPool{w: w, log: log, size: min(size, protocol.MaxChannelsPerCall), maxAge: PoolMaxAge,
		waits: make(chan struct{}, MaxPeerWaits)}
}

// Create hands out a pooled channel, or makes one when none is left.
func (p *ChannelPool) Create(ctx context.Context) (protocol.ChannelRef, protocol.ChannelRef, error) {
	now := time.Now()
	p.mu.Lock()
	for len(p.free) > 0 && now.Sub(p.free[0].made) > p.maxAge {
		p.doomLocked(p.free[0].pair.Reader)
		p.free = p.free[1:]
	}
	var got protocol.ChannelPair
	pooled := len(p.free) > 0
	if pooled {
		got = p.free[0].pair
		p.free = p.free[1:]
	}
	p.refillLocked()
	p.mu.Unlock()
	if pooled {
		return got.Reader, got.Writer, nil
	}
	return p.w.CreateChannel(ctx)
}

// Remove removes the channel of ref with the next batch; once the pool is closed, at once.
func (p *ChannelPool) Remove(ctx context.Context, ref protocol.ChannelRef) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return p.w.RemoveChannel(ctx, ref)
	}
	p.doomLocked(ref)
	p.mu.Unlock()
	return nil
}

// AwaitPeer waits until, of one of the channels of refs, the end opposite ref connects
// (engine::channels::await_peer), up to MaxPeerWaits at once.
func (p *ChannelPool) AwaitPeer(ctx context.Context, refs []protocol.ChannelRef) (string, bool, error) {
	select {
	case p.waits <- struct{}{}:
	default:
		return "", false, errNoPeerWait
	}
	defer func() { <-p.waits }()
	return p.w.AwaitPeer(ctx, refs)
}

// OpenWriter connects to the write end ref.
func (p *ChannelPool) OpenWriter(ctx context.Context, ref protocol.ChannelRef) (*protocol.ChannelWriter, error) {
	return protocol.DialWriter(ctx, p.w.URL(), ref)
}

// OpenReader connects to the read end ref.
func (p *ChannelPool) OpenReader(ctx context.Context, ref protocol.ChannelRef) (*protocol.ChannelReader, error) {
	return protocol.DialReader(ctx, p.w.URL(), ref)
}

// Held is how many channels the pool holds for requests to come.
func (p *ChannelPool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Close stops refilling, removes the channels the pool holds and those queued for removal, and
// waits for that (or ctx). Channels removed later are removed one by one.
func (p *ChannelPool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	for _, c := range p.free {
		p.doomLocked(c.pair.Reader)
	}
	p.free = nil
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refillLocked starts a refill when half the pool is taken, unless one runs, the pool is
// closed, or the last one failed under poolRetry ago.
func (p *ChannelPool) refillLocked() {
	if p.closed || p.filling || len(p.free) > p.size/2 || time.Since(p.failedAt) < poolRetry {
		return
	}
	p.filling = true
	p.wg.Add(1)
	go p.refill()
}

func (p *ChannelPool) refill() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		n := p.size - len(p.free)
		if p.closed || n <= 0 {
			p.filling = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		made := time.Now() // no later than the engine's creation: the age errs on the safe side
		ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
		pairs, err := p.w.CreateChannels(ctx, n)
		cancel()
		p.mu.Lock()
		if err != nil {
			p.filling, p.failedAt = false, time.Now()
			p.mu.Unlock()
			p.log.Warn("making stream channels ahead of the requests; each request makes its own meanwhile", "count", n, "err", err)
			return
		}
		for _, pair := range pairs {
			if p.closed {
				p.doomLocked(pair.Reader)
			} else {
				p.free = append(p.free, pooledChannel{pair, made})
			}
		}
		p.mu.Unlock()
	}
}

// doomLocked queues ref for removal and starts the removal of the queue, after removeDelay,
// unless it has started.
func (p *ChannelPool) doomLocked(ref protocol.ChannelRef) {
	p.doomed = append(p.doomed, ref)
	if p.flushing {
		return
	}
	p.flushing = true
	p.wg.Add(1)
	time.AfterFunc(removeDelay, p.flush)
}

func (p *ChannelPool) flush() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		batch := p.doomed
		if len(batch) > protocol.MaxChannelsPerCall {
			batch, p.doomed = batch[:protocol.MaxChannelsPerCall], batch[protocol.MaxChannelsPerCall:]
		} else {
			p.doomed = nil
		}
		if len(batch) == 0 {
			p.flushing = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
		err := p.w.RemoveChannels(ctx, batch)
		cancel()
		if err != nil {
			// The engine forgets them at its attach or idle deadline.
			p.log.Warn("removing finished requests' stream channels", "count", len(batch), "err", err)
		}
	}
}
