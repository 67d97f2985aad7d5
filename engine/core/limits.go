package core

import "time"

// Default limits (README.md, "Limits"). Each applies when its Options field is zero.
const (
	// DefaultHandshakeTimeout closes a socket that has not sent its HTTP upgrade request by then
	// (config.yaml handshake_timeout_ms).
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultWriteTimeout is how long one socket write (the frames queued at once, gathered up
	// to 64 KiB) may take to reach a peer; a connection that misses it is closed as
	// SLOW_CONSUMER.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultQueueBytes and DefaultQueueFrames bound what waits to be written to one
	// connection; a frame that would pass either closes the connection as SLOW_CONSUMER. A
	// frame into an empty queue is always taken, so one frame of up to protocol.MaxFrameBytes
	// gets through.
	DefaultQueueBytes  = 16 << 20
	DefaultQueueFrames = 4096
	// DefaultFrameBudget bounds the memory of the frames all connections are reading at once,
	// taken as their bytes arrive (never as a header declares them) and including each
	// connection's reused read buffer (at most 64 KiB). One connection may hold at most a
	// quarter of it; past that it is closed as FRAME_BUDGET_EXCEEDED. When a take would pass
	// the budget, the connection holding the most is closed as FRAME_BUDGET_EXCEEDED instead of
	// the one asking (unless that one holds the most); a message that fits in a connection's
	// held buffer needs no budget.
	DefaultFrameBudget = 256 << 20
	// DefaultFrameTimeout and DefaultFrameMinRate bound how long a message may take to arrive
	// once its first frame header did: all of it within DefaultFrameTimeout plus one second per
	// DefaultFrameMinRate bytes read so far, or the connection is closed as FRAME_TIMEOUT. The
	// time between messages is not bounded.
	DefaultFrameTimeout = 10 * time.Second
	DefaultFrameMinRate = 64 << 10
	// DefaultMaxInflight is how many engine-served calls (built-ins that may block, the sandbox
	// router; not the HandleInline ones, served on the read loop) one
	// connection may have running; one more is answered TOO_MANY_CALLS.
	DefaultMaxInflight = 256
	// DefaultMaxCallTimeout is the timeout of a call that names none, and the most a call may
	// name (timeout_ms); past it the caller gets "timeout".
	DefaultMaxCallTimeout = 10 * time.Minute
	// DefaultRegisterTimeout closes a connection that neither called engine::workers::register
	// nor registered a function by then, as REGISTRATION_TIMEOUT.
	DefaultRegisterTimeout = 30 * time.Second
	// DefaultChannelBytes bounds the bytes buffered in one stream channel, and
	// DefaultChannelBudget those of all channels together; a writer past either waits
	// (back-pressure). A frame into an empty channel is always taken.
	DefaultChannelBytes  = 4 << 20
	DefaultChannelBudget = 256 << 20
	// DefaultMaxChannels is how many stream channels the engine holds at once; one more
	// engine::channels::create is answered CHANNEL_LIMIT.
	DefaultMaxChannels = 4096
	// ChannelShareDivisor sets Options.ChannelShare's default, the channels one connection of
	// an ungated listener may hold: MaxChannels/4, so that one worker cannot take the table
	// from every other. A session of a gated listener holds at most MaxChannels/16
	// (GatedChannelDivisor), and all such sessions together at most MaxChannels less one
	// ChannelShare, which stays for trusted workers (the http worker's requests).
	ChannelShareDivisor = 4
	GatedChannelDivisor = 16
	// DefaultChannelAttach forgets a channel an end of which has not connected by then (so also
	// the frames of one aborted before its reader came).
	DefaultChannelAttach = 30 * time.Second
)

// withDefaults fills every zero limit of o with its default.
func (o Options) withDefaults() Options {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	seti := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	set(&o.Grace, time.Second)
	set(&o.ChannelIdle, DefaultChannelIdle)
	set(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	set(&o.WriteTimeout, DefaultWriteTimeout)
	set(&o.MaxCallTimeout, DefaultMaxCallTimeout)
	set(&o.RegisterTimeout, DefaultRegisterTimeout)
	set(&o.FrameTimeout, DefaultFrameTimeout)
	set(&o.ChannelAttach, DefaultChannelAttach)
	seti(&o.QueueBytes, DefaultQueueBytes)
	seti(&o.QueueFrames, DefaultQueueFrames)
	seti(&o.FrameBudget, DefaultFrameBudget)
	seti(&o.FrameMinRate, DefaultFrameMinRate)
	seti(&o.MaxInflight, DefaultMaxInflight)
	seti(&o.ChannelBytes, DefaultChannelBytes)
	seti(&o.ChannelBudget, DefaultChannelBudget)
	seti(&o.MaxChannels, DefaultMaxChannels)
	seti(&o.ChannelShare, max(1, o.MaxChannels/ChannelShareDivisor))
	return o
}
