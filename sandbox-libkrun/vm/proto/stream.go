package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Streams (revision 5). A streamed fs op moves its file as Data frames of at most StreamChunk
// bytes, ended by an End frame. The sender keeps at most StreamWindow bytes in flight: it starts
// with that much credit, spends a Data frame's length on sending it, and regains bytes when the
// receiver sends Credit for what it took. So each side holds at most one window of a file in
// memory, whatever the file's size, and a slow consumer never blocks the control port (the
// exec output and the other fs ops that share it). Either side may end a stream early with an
// End whose payload says why; the other side then stops and drops what is still in flight.
const (
	StreamChunk  = 256 << 10
	StreamWindow = 16 * StreamChunk
)

// CreditFrame is the Credit for n bytes taken from stream id.
func CreditFrame(id uint32, n int) Frame {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return Frame{Type: TypeCredit, ID: id, Payload: b[:]}
}

// ParseCredit returns the byte count of a Credit frame's payload.
func ParseCredit(p []byte) (int, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("proto: credit payload of %d bytes, want 4", len(p))
	}
	n := binary.BigEndian.Uint32(p)
	if n > StreamWindow {
		return 0, fmt.Errorf("proto: credit of %d bytes exceeds the window", n)
	}
	return int(n), nil
}

// EndFrame ends stream id: complete when reason is empty, else aborted for reason.
func EndFrame(id uint32, reason string) Frame {
	return Frame{Type: TypeEnd, ID: id, Payload: []byte(reason)}
}

// ErrStreamWindow is a peer that broke a stream's protocol: it sent beyond its window, or a
// malformed frame (see Stream.Deliver).
var ErrStreamWindow = errors.New("proto: the stream's peer sent beyond its window or a malformed frame")

// StreamQueue bounds the frames a Stream queues for its consumer: a reply, a window of full
// Data frames, the End, and slack for a last short frame.
const StreamQueue = StreamWindow/StreamChunk + 4

// Stream is one end of a stream as the read loop of its port sees it: the peer's frames for it
// in order (Frames), the credit the peer granted this end (Win), and Stopped, closed once the
// stream cannot go on. The host and the guest agent each keep one per streamed fs op.
type Stream struct {
	Frames  chan Frame
	Win     *Window
	stopped chan struct{}
	once    sync.Once
}

// NewStream returns a stream with an empty queue and a full window.
func NewStream() *Stream {
	return &Stream{Frames: make(chan Frame, StreamQueue), Win: NewWindow(), stopped: make(chan struct{})}
}

// Deliver routes a frame of the peer without blocking: a Credit adds to Win, any other frame
// is queued. A peer that breaks the protocol (a malformed Credit, credit past the window, a
// Data frame over StreamChunk, more frames than the window allows) stops the stream instead.
func (s *Stream) Deliver(f Frame) {
	if f.Type == TypeCredit {
		n, err := ParseCredit(f.Payload)
		if err != nil || s.Win.Grant(n) > StreamWindow {
			s.Stop()
		}
		return
	}
	if f.Type == TypeData && len(f.Payload) > StreamChunk {
		s.Stop()
		return
	}
	select {
	case s.Frames <- f:
	default:
		s.Stop()
	}
}

// Stop closes Stopped, once.
func (s *Stream) Stop() { s.once.Do(func() { close(s.stopped) }) }

// Stopped is closed once the stream stopped.
func (s *Stream) Stopped() <-chan struct{} { return s.stopped }

// Take spends n bytes of credit, waiting for the peer to grant them; false once the stream
// stopped, even with credit left.
func (s *Stream) Take(n int) bool {
	for {
		select {
		case <-s.stopped:
			return false
		default:
		}
		if s.Win.TryTake(n) {
			return true
		}
		select {
		case <-s.Win.More():
		case <-s.stopped:
			return false
		}
	}
}

// Window is a sender's credit on one stream: StreamWindow bytes at the start, spent on each
// Data frame it sends (TryTake) and regained from the receiver's Credit frames (Grant). It is
// safe for concurrent use.
type Window struct {
	mu     sync.Mutex
	credit int
	more   chan struct{} // capacity 1: credit was granted
}

// NewWindow returns a full window.
func NewWindow() *Window {
	return &Window{credit: StreamWindow, more: make(chan struct{}, 1)}
}

// Grant adds n bytes of credit, wakes a sender waiting on More, and returns the credit now
// held: above StreamWindow, the receiver granted more than it was sent.
func (w *Window) Grant(n int) int {
	w.mu.Lock()
	w.credit += n
	c := w.credit
	w.mu.Unlock()
	select {
	case w.more <- struct{}{}:
	default:
	}
	return c
}

// TryTake spends n bytes of credit when the window holds them; otherwise it spends nothing and
// the sender waits on More before it tries again.
func (w *Window) TryTake(n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.credit < n {
		return false
	}
	w.credit -= n
	return true
}

// More receives after a Grant.
func (w *Window) More() <-chan struct{} { return w.more }

// Receiver is the receiving end of one stream as an io.Reader. It takes the stream's frames
// from Next and grants Credit for a Data frame (through Grant) only once its bytes are read, so
// the sender's window reopens as fast as the consumer reads and no faster. An End ends the
// reads: with io.EOF when complete, else with an error of AbortPrefix and the End's reason.
type Receiver struct {
	Next        func() (Frame, error) // the stream's next frame; an error ends the reads with it
	Grant       func(n int) error     // sends Credit for n bytes taken
	AbortPrefix string                // begins the error of an aborting End

	cur   []byte // the rest of the Data frame being read
	frame []byte // all of it, released once taken
	taken int    // the bytes of frame to grant
	err   error
}

// Read reads the stream's bytes.
func (r *Receiver) Read(p []byte) (int, error) {
	b, err := r.peek()
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	r.cur = b[n:]
	return n, nil
}

// Chunk returns the rest of the Data frame being read, reading the next one when it is used
// up, and counts it as taken; the bytes are valid until the next call.
func (r *Receiver) Chunk() ([]byte, error) {
	b, err := r.peek()
	r.cur = nil
	return b, err
}

// peek returns the unread bytes of the current Data frame; when there are none it grants the
// credit of the frame taken and reads frames until a Data frame or the end of the stream.
func (r *Receiver) peek() ([]byte, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return nil, r.err
		}
		if r.taken > 0 {
			if err := r.Grant(r.taken); err != nil {
				r.err = err
				return nil, err
			}
			r.taken = 0
			Release(r.frame)
			r.frame = nil
		}
		f, err := r.Next()
		switch {
		case err != nil:
			r.err = err
		case f.Type == TypeData:
			r.cur, r.frame, r.taken = f.Payload, f.Payload, len(f.Payload)
		case f.Type == TypeEnd && len(f.Payload) == 0:
			r.err = io.EOF
		case f.Type == TypeEnd:
			r.err = fmt.Errorf("%s%s", r.AbortPrefix, f.Payload)
		default:
			r.err = fmt.Errorf("proto: unexpected frame type %d in a stream", f.Type)
		}
	}
	return r.cur, nil
}

// Settle grants the credit of the Data frame being read as soon as Read has taken all of its
// bytes, instead of at the next read: a reader that may stop between frames (a process
// attachment that is then detached) has credited every byte it took, so the sender resumes
// after the last of them. Bytes Chunk returned are valid until the next call of either.
func (r *Receiver) Settle() error {
	if len(r.cur) > 0 || r.taken == 0 || r.err != nil {
		return r.err
	}
	if err := r.Grant(r.taken); err != nil {
		r.err = err
		return err
	}
	r.taken = 0
	Release(r.frame)
	r.frame = nil
	return nil
}
