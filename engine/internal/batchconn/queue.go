package batchconn

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// Queue is a connection's outbound text frames: senders Push encoded payloads without waiting
// for the socket, and one goroutine (Run) writes every frame queued at once with one socket
// write (WriteText), so under load a wake-up of the peer carries many frames, not one. It is
// the writer of the engine's worker connections and of the SDK's link.
type Queue struct {
	c                   *Conn
	mask                bool // client side: frames are masked
	maxBytes, maxFrames int  // 0: no limit

	mu    sync.Mutex
	out   [][]byte
	bytes int      // bytes of out plus those of the frames being written
	free  [][]byte // written frames' buffers, for Buf
	busy  bool     // Run has been woken and not yet found out empty
	err   error    // set by Stop: nothing more is taken
	after func()   // set by StopAfter: run once out is written
	wake  chan struct{}
	done  chan struct{}
	idle  *sync.Cond // signalled when busy turns false or err is set
}

// Buffers a Queue keeps for Buf: at most maxFree, each of at most maxFreeCap bytes.
const (
	maxFree    = 256
	maxFreeCap = 4 << 10
)

// FullError is Push's error when the frame would overflow the queue's limits; the queue is
// stopped with it.
type FullError struct{ Frames, Bytes int }

func (e *FullError) Error() string {
	return fmt.Sprintf("%d frames (%d bytes) wait to be written", e.Frames, e.Bytes)
}

// WriteError is Run's error when a socket write failed.
type WriteError struct {
	Bytes int // the size of the frames the write carried
	Err   error
}

func (e *WriteError) Error() string { return fmt.Sprintf("writing %d bytes: %v", e.Bytes, e.Err) }

func (e *WriteError) Unwrap() error { return e.Err }

// ErrStopping is Push's error once StopAfter was called.
var ErrStopping = errors.New("batchconn: the connection is closing")

// NewQueue returns the queue of c; mask is true on the client side. A frame that would take a
// non-empty queue past maxFrames frames or maxBytes bytes (0: no limit) is refused with
// FullError.
func NewQueue(c *Conn, mask bool, maxBytes, maxFrames int) *Queue {
	q := &Queue{c: c, mask: mask, maxBytes: maxBytes, maxFrames: maxFrames,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	q.idle = sync.NewCond(&q.mu)
	return q
}

// Buf returns an empty buffer to encode the next frame into: one a written frame left, when
// there is one.
func (q *Queue) Buf() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := len(q.free); n > 0 {
		b := q.free[n-1]
		q.free[n-1] = nil
		q.free = q.free[:n-1]
		return b
	}
	return nil
}

// Push queues the payload b, which the queue owns from then on: once b is written its memory
// serves a later Buf, so b must not be shared (encode each frame into Buf's buffer). It fails
// with the queue's stop error, ErrStopping, or a FullError (which stops the queue).
func (q *Queue) Push(b []byte) error {
	q.mu.Lock()
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return err
	}
	if q.after != nil {
		q.mu.Unlock()
		return ErrStopping
	}
	if len(q.out) > 0 && ((q.maxBytes > 0 && q.bytes+len(b) > q.maxBytes) || (q.maxFrames > 0 && len(q.out) >= q.maxFrames)) {
		err := &FullError{Frames: len(q.out), Bytes: q.bytes}
		q.stopLocked(err)
		q.mu.Unlock()
		return err
	}
	q.out = append(q.out, b)
	q.bytes += len(b)
	wake := !q.busy
	q.busy = true
	q.mu.Unlock()
	if wake {
		q.signal()
	}
	return nil
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// StopAfter makes Run call f and return once the frames already queued are written; Push
// takes nothing more.
func (q *Queue) StopAfter(f func()) {
	q.mu.Lock()
	if q.after == nil {
		q.after = f
	}
	q.busy = true
	q.mu.Unlock()
	q.signal()
}

// Stop drops the queued frames and makes Push fail with err and Run return; the first call's
// err stays.
func (q *Queue) Stop(err error) {
	q.mu.Lock()
	q.stopLocked(err)
	q.mu.Unlock()
}

func (q *Queue) stopLocked(err error) {
	if q.err == nil {
		q.err = err
		close(q.done)
	}
	q.out, q.free = nil, nil
	q.idle.Broadcast()
}

// Drain waits until the frames queued so far are written or the queue stopped.
func (q *Queue) Drain() {
	q.mu.Lock()
	for q.busy && q.err == nil {
		q.idle.Wait()
	}
	q.mu.Unlock()
}

// Run writes queued frames until Stop, a StopAfter's function ran, a close frame was sent
// (ErrCloseSent stops the queue), or a write fails (a *WriteError, after which the queue is
// stopped with it).
func (q *Queue) Run() error {
	var batch [][]byte
	yielded := false
	for {
		select {
		case <-q.wake:
		case <-q.done:
			return nil
		}
		for {
			q.mu.Lock()
			if q.err != nil {
				q.mu.Unlock()
				return nil
			}
			if len(q.out) == 0 {
				yielded = false
				q.busy = false
				q.idle.Broadcast()
				after := q.after
				q.mu.Unlock()
				if after != nil {
					after()
					return nil
				}
				break
			}
			if len(q.out) == 1 && !yielded {
				// One frame: let the goroutines that are about to send run first, so that
				// under load their frames join this write.
				yielded = true
				q.mu.Unlock()
				runtime.Gosched()
				continue
			}
			yielded = false
			batch, q.out = q.out, batch[:0]
			q.mu.Unlock()
			n := 0
			for _, b := range batch {
				n += len(b)
			}
			err := q.c.WriteText(batch, q.mask)
			q.mu.Lock()
			q.bytes -= n
			for _, b := range batch {
				if cap(b) <= maxFreeCap && len(q.free) < maxFree && q.err == nil {
					q.free = append(q.free, b[:0])
				}
			}
			if errors.Is(err, ErrCloseSent) { // the connection is closing: not a failed write
				q.stopLocked(err)
				q.mu.Unlock()
				return nil
			}
			if err != nil {
				werr := &WriteError{Bytes: n, Err: err}
				q.stopLocked(werr)
				q.mu.Unlock()
				return werr
			}
			q.mu.Unlock()
			clear(batch)
		}
	}
}
