package proto

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Dial asks the agent (revision 10) to connect to Port on the guest's loopback (127.0.0.1, then
// ::1). Its Reply comes once connected, or carries DialRefused when nothing accepted; from then
// on the frame's id is the connection's: each side sends the bytes it reads as Data frames
// under the other's credit, an End with an empty payload when its reader reached end of file
// (the peer then closes its socket's write side), an End with a reason to drop the connection.
type Dial struct {
	Port int `json:"port"`
}

// DialRefused is the code of a Dial's Reply when nothing accepted the connection.
const DialRefused = "dial_refused"

// ConnEnd is one end of a relayed connection as both the host and the agent keep it: bytes
// received (Deliver) wait in a buffer that Read drains, granting Credit for what it took;
// Write sends Data frames under the credit the peer granted. The peer never has more than
// StreamWindow bytes in flight, so the buffer holds at most that much, however small its
// frames. It is safe for concurrent use by one reader, one writer and the port's read loop.
type ConnEnd struct {
	id   uint32
	send func(Frame) error

	mu       sync.Mutex
	cond     *sync.Cond
	buf      []byte // received, not yet read
	rerr     error  // what Read returns once buf is empty: io.EOF after the peer's complete End
	credit   int    // bytes this end may still send
	werr     error  // the peer's abort or this end's close: Write fails with it
	sentEnd  bool   // this end sent its End
	gotEnd   bool   // the peer sent its End
	rdl, wdl time.Time
	timers   [2]*time.Timer
}

// NewConnEnd returns the end of connection id that sends its frames with send.
func NewConnEnd(id uint32, send func(Frame) error) *ConnEnd {
	c := &ConnEnd{id: id, send: send, credit: StreamWindow}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// ID is the connection's frame id.
func (c *ConnEnd) ID() uint32 { return c.id }

// ErrConnClosed is a Read or Write on an end that was closed.
var ErrConnClosed = errors.New("proto: the connection was closed")

// Deliver takes a Data, End or Credit frame of the peer without blocking. A peer that sends
// beyond its window, or credit beyond what it was sent, breaks the connection: both sides see
// ErrStreamWindow and the peer gets an End saying so.
func (c *ConnEnd) Deliver(f Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.cond.Broadcast()
	switch f.Type {
	case TypeData:
		if c.gotEnd {
			return
		}
		if len(c.buf)+len(f.Payload) > StreamWindow {
			c.failLocked(ErrStreamWindow, "protocol: data beyond the window")
			return
		}
		c.buf = append(c.buf, f.Payload...)
	case TypeCredit:
		n, err := ParseCredit(f.Payload)
		if err == nil && c.credit+n > StreamWindow {
			err = ErrStreamWindow
		}
		if err != nil {
			c.failLocked(ErrStreamWindow, "protocol: credit beyond the window")
			return
		}
		c.credit += n
	case TypeEnd:
		c.gotEnd = true
		if len(f.Payload) == 0 {
			if c.rerr == nil {
				c.rerr = io.EOF
			}
			return
		}
		err := fmt.Errorf("proto: the peer dropped the connection: %s", f.Payload)
		if c.rerr == nil || c.rerr == io.EOF {
			c.rerr = err
		}
		if c.werr == nil {
			c.werr = err
		}
		c.sentEnd = true // a dropped connection needs no End of ours
	}
}

// failLocked ends both directions with err and tells the peer why.
func (c *ConnEnd) failLocked(err error, reason string) {
	if c.rerr == nil || c.rerr == io.EOF {
		c.rerr = err
	}
	c.buf = nil
	if c.werr == nil {
		c.werr = err
	}
	if !c.sentEnd {
		c.sentEnd = true
		_ = c.send(EndFrame(c.id, reason))
	}
}

// Read reads what the peer sent: its bytes first, then io.EOF after its complete End, or the
// error that ended the connection.
func (c *ConnEnd) Read(p []byte) (int, error) {
	c.mu.Lock()
	for len(c.buf) == 0 && c.rerr == nil {
		if !c.rdl.IsZero() && !time.Now().Before(c.rdl) {
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		c.cond.Wait()
	}
	if len(c.buf) == 0 {
		err := c.rerr
		c.mu.Unlock()
		return 0, err
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	if len(c.buf) == 0 {
		c.buf = nil
	}
	grant := !c.gotEnd
	c.mu.Unlock()
	if grant {
		if err := c.send(CreditFrame(c.id, n)); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Write sends p as Data frames, each once the peer granted room for it.
func (c *ConnEnd) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		c.mu.Lock()
		for c.credit == 0 && c.werr == nil {
			if !c.wdl.IsZero() && !time.Now().Before(c.wdl) {
				c.mu.Unlock()
				return written, os.ErrDeadlineExceeded
			}
			c.cond.Wait()
		}
		if c.werr != nil {
			err := c.werr
			c.mu.Unlock()
			return written, err
		}
		n := min(len(p), c.credit, StreamChunk)
		c.credit -= n
		c.mu.Unlock()
		if err := c.send(Frame{Type: TypeData, ID: c.id, Payload: p[:n]}); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseWrite sends the complete End: the peer reads end of file after the bytes sent.
func (c *ConnEnd) CloseWrite() error {
	c.mu.Lock()
	if c.werr == nil {
		c.werr = ErrConnClosed
	}
	if c.sentEnd {
		c.mu.Unlock()
		return nil
	}
	c.sentEnd = true
	c.mu.Unlock()
	c.cond.Broadcast()
	return c.send(EndFrame(c.id, ""))
}

// Close drops the connection: unless both sides already ended it, the peer gets an End with
// reason, and this end's Reads and Writes fail.
func (c *ConnEnd) Close(reason string) {
	c.mu.Lock()
	// A half-closed connection's peer may still be sending: it is told too.
	send := !c.sentEnd || !c.gotEnd
	c.sentEnd = true
	if c.rerr == nil || c.rerr == io.EOF {
		c.rerr = ErrConnClosed
	}
	c.buf = nil
	if c.werr == nil {
		c.werr = ErrConnClosed
	}
	for _, t := range c.timers {
		if t != nil {
			t.Stop()
		}
	}
	c.mu.Unlock()
	c.cond.Broadcast()
	if send {
		_ = c.send(EndFrame(c.id, reason))
	}
}

// Done reports whether both sides ended their direction (the end may be forgotten).
func (c *ConnEnd) Done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sentEnd && c.gotEnd
}

// SetReadDeadline and SetWriteDeadline make a Read or Write waiting past t fail with
// os.ErrDeadlineExceeded; the zero time waits without bound.
func (c *ConnEnd) SetReadDeadline(t time.Time) error  { c.setDeadline(0, t); return nil }
func (c *ConnEnd) SetWriteDeadline(t time.Time) error { c.setDeadline(1, t); return nil }

func (c *ConnEnd) setDeadline(i int, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i == 0 {
		c.rdl = t
	} else {
		c.wdl = t
	}
	if c.timers[i] != nil {
		c.timers[i].Stop()
		c.timers[i] = nil
	}
	if !t.IsZero() {
		c.timers[i] = time.AfterFunc(time.Until(t), c.cond.Broadcast)
	}
	c.cond.Broadcast()
}
