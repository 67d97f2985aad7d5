package httpworker

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// poolEngine runs an engine with o in the process and a worker connected to it.
func poolEngine(t *testing.T, o core.Options) (*core.Engine, *protocol.Worker) {
	t.Helper()
	t.Setenv(protocol.EnvTokenFile, "")
	t.Setenv(protocol.EnvToken, "")
	e := core.New(o)
	url := enginetest.Start(t, e).URL
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "http", NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return e, w
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A pool hands each channel to one request only, even to many at once; refills itself; never
// hands out a channel older than its age limit; and Close leaves the engine no channel.
func TestChannelPool(t *testing.T) {
	e, w := poolEngine(t, core.Options{})
	p := NewChannelPool(w, 8, quietLog())
	ctx := context.Background()

	var mu sync.Mutex
	seen := map[string]bool{}
	var refs []protocol.ChannelRef
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 20 {
				rd, wr, err := p.Create(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if rd.ChannelID != wr.ChannelID || rd.Direction != protocol.ChannelRead || wr.Direction != protocol.ChannelWrite {
					t.Errorf("ends %+v %+v", rd, wr)
				}
				if seen[rd.ChannelID] {
					t.Errorf("channel %s handed out twice", rd.ChannelID)
				}
				seen[rd.ChannelID] = true
				refs = append(refs, rd)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	enginetest.Eventually(t, "the pool to refill", 10*time.Second, func() bool { return p.Held() > 8/2 })
	if n, want := e.ChannelCount(), len(refs)+p.Held(); n != want {
		t.Errorf("engine holds %d channels, want %d handed out + %d pooled", n, len(refs), p.Held())
	}
	for _, ref := range refs {
		if err := p.Remove(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, "the removed channels to go", 10*time.Second, func() bool { return e.ChannelCount() == p.Held() })

	// Past the age limit a pooled channel is removed, not handed out.
	p.mu.Lock()
	old := map[string]bool{}
	for _, c := range p.free {
		old[c.pair.ChannelID] = true
	}
	p.maxAge = 0
	p.mu.Unlock()
	rd, _, err := p.Create(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old[rd.ChannelID] {
		t.Errorf("a channel older than the age limit was handed out")
	}
	if err := p.Remove(ctx, rd); err != nil {
		t.Fatal(err)
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Close(cctx); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the engine to forget every channel", 10*time.Second, func() bool { return e.ChannelCount() == 0 })
	if p.Held() != 0 {
		t.Errorf("a closed pool holds %d channels", p.Held())
	}
	// A closed pool still makes and removes channels, one by one.
	rd, _, err = p.Create(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, rd); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the engine to forget the last channel", 10*time.Second, func() bool { return e.ChannelCount() == 0 })
}

// A pool larger than the room under the engine's CHANNEL_LIMIT takes none of it: its refill
// fails whole, and the requests make their own channels up to the limit, as without a pool.
func TestChannelPoolKeepsTheLimit(t *testing.T) {
	const limit = 6
	e, w := poolEngine(t, core.Options{MaxChannels: limit, ChannelShare: limit})
	p := NewChannelPool(w, 8, quietLog())
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx := context.Background()
	for i := range limit {
		if _, _, err := p.Create(ctx); err != nil {
			t.Fatalf("channel %d of %d: %v", i+1, limit, err)
		}
	}
	if _, _, err := p.Create(ctx); protocol.AsError(err).Code != errcode.ChannelLimit {
		t.Errorf("a channel past the limit: %v, want CHANNEL_LIMIT", err)
	}
	if n := e.ChannelCount(); n != limit || p.Held() != 0 {
		t.Errorf("engine holds %d channels, the pool %d; want %d and 0", n, p.Held(), limit)
	}
}

// countingChannels counts the worker's connections to its channel ends.
type countingChannels struct {
	Channels
	opens atomic.Int32
}

func (c *countingChannels) OpenWriter(ctx context.Context, ref protocol.ChannelRef) (*protocol.ChannelWriter, error) {
	c.opens.Add(1)
	return c.Channels.OpenWriter(ctx, ref)
}

func (c *countingChannels) OpenReader(ctx context.Context, ref protocol.ChannelRef) (*protocol.ChannelReader, error) {
	c.opens.Add(1)
	return c.Channels.OpenReader(ctx, ref)
}

// lazyChannels is countingChannels that also tell when a handler connects an end.
type lazyChannels struct {
	*countingChannels
	pool *ChannelPool
}

func (c lazyChannels) AwaitPeer(ctx context.Context, refs []protocol.ChannelRef) (string, bool, error) {
	return c.pool.AwaitPeer(ctx, refs)
}

// A handler that answers normally after longer than attachGrace costs no connection to the
// channel ends with a pool (the worker connects an end once the handler connects the other);
// without one, the worker connects both after attachGrace. A handler that streams still
// streams.
func TestPlainRequestConnectsNoEnd(t *testing.T) {
	env := &streamEnv{}
	env = streamServer(t, Defaults(), map[string]handler{
		"slow": func(ctx context.Context, _ streamReq) (any, error) {
			// The handler's run time under test (past attachGrace), not a synchronisation.
			select {
			case <-time.After(25 * attachGrace):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return map[string]any{"body": "ok"}, nil
		},
		"stream": func(ctx context.Context, req streamReq) (any, error) {
			w, err := protocol.DialWriter(ctx, env.url, req.Response)
			if err != nil {
				return nil, err
			}
			_ = write(t, w, "streamed")
			return nil, w.Close()
		},
	})
	pooled := &countingChannels{Channels: env.pool}
	unpooled := &countingChannels{Channels: WorkerChannels(env.w)}
	for _, c := range []struct {
		name  string
		chans Channels
		count *countingChannels
		want  func(int32) bool
	}{
		{"pooled", lazyChannels{pooled, env.pool}, pooled, func(n int32) bool { return n == 0 }},
		{"unpooled", unpooled, unpooled, func(n int32) bool { return n == 2 }},
	} {
		env.s.SetChannels(c.chans)
		res, body := do(t, "GET", env.ts.URL+"/slow", "", nil)
		if res.StatusCode != 200 || body != "ok" {
			t.Errorf("%s: %d %q", c.name, res.StatusCode, body)
		}
		if n := c.count.opens.Load(); !c.want(n) {
			t.Errorf("%s: the worker connected %d channel ends for a plain request", c.name, n)
		}
		res, body = do(t, "GET", env.ts.URL+"/stream", "", nil)
		if res.StatusCode != 200 || body != "streamed" {
			t.Errorf("%s: streamed %d %q", c.name, res.StatusCode, body)
		}
	}
}
