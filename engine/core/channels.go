package core

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/iii-go/iii/engine/core/channels"
)

// The stream channels' table is package channels; the engine gives it its limits, its
// built-ins' callers, the requests for /ws/channels/ and, in a cluster, the way to channels
// other engines hold (clusterchannels.go).

// Channel buffer limits, in frames, and the idle deadline's default (package channels).
const (
	DefaultChannelBuffer = channels.DefaultBuffer
	MaxChannelBuffer     = channels.MaxBuffer
	DefaultChannelIdle   = channels.DefaultIdle
)

// newChannels is the engine's channel table, bounded by o's limits.
func newChannels(o Options) *channels.Table {
	return channels.New(channels.Limits{Idle: o.ChannelIdle, Attach: o.ChannelAttach, Bytes: o.ChannelBytes,
		Budget: o.ChannelBudget, Max: o.MaxChannels, Share: o.ChannelShare, GatedShare: o.MaxChannels / GatedChannelDivisor})
}

// channelBuiltin is a built-in of the table's, called with the creator the caller is: its
// worker id ("" for the engine's own calls, which no share bounds) and whether it is a
// session of a gated listener.
func channelBuiltin(fn func(context.Context, channels.Creator, json.RawMessage) (any, error)) Builtin {
	return func(ctx context.Context, c Caller, payload json.RawMessage) (any, error) {
		var by channels.Creator
		if c.conn != nil {
			by = channels.Creator{ID: c.conn.id, Gated: c.conn.session != nil}
		}
		return fn(ctx, by, payload)
	}
}

// serveChannel upgrades a request for /ws/channels/{id}?key= on listener l to one end of that
// channel, held here or, in a cluster, by another engine.
func (e *Engine) serveChannel(w http.ResponseWriter, r *http.Request, id string, l *listener) {
	e.chans.Serve(w, r, id, channels.Connect{
		Accept:    acceptOptions(l),
		End:       func(keys [2]string) int { return e.channelEnd(keys, id, r) },
		Elsewhere: func() bool { return e.proxyChannel(w, r, id, l) },
	})
}

// ChannelBytes reports the bytes all stream channels hold for their readers.
func (e *Engine) ChannelBytes() int { return e.chans.Bytes() }

// ChannelCount reports how many stream channels the engine holds.
func (e *Engine) ChannelCount() int { return e.chans.Live() }
