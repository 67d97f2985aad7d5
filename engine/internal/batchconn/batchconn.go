// Package batchconn is the worker connection's WebSocket (RFC 6455, no extensions) on a raw
// net.Conn. One writer sends many frames with one socket write (WriteText), where a WebSocket
// library writes and flushes each message on its own: the sender makes one system call for the
// run and the peer wakes once for all of it. The reader (ReadMessage) parses frames from a
// buffered reader with no lock or timer per message, answering pings and closes itself. Accept
// and Dial do the handshakes (github.com/gobwas/ws); stream channels use coder/websocket.
//
// Control frames never wait behind a run of data frames: the reader hands its pongs and close
// answers to whoever holds the socket for writing, which sends them before its next socket
// write, so the reader never blocks on a slow writer.
package batchconn

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// MaxHeld is how many bytes WriteText gathers before it writes them anyway.
const MaxHeld = 64 << 10

// Conn is a net.Conn that can send many frames together. Every socket write it
// makes has a deadline of WriteTimeout (when set), so a peer that does not read fails the write
// with os.ErrDeadlineExceeded instead of blocking its writer. It is safe for concurrent use.
type Conn struct {
	net.Conn
	writeTimeout time.Duration

	mu           sync.Mutex
	buf          []byte // frames being gathered by WriteText
	closeWritten bool   // the close frame was written: nothing more is

	cmu         sync.Mutex // guards the control frames waiting for the socket
	ctrlPing    []byte     // nil: none waiting
	ctrlPong    []byte     // only the answer to the latest ping waits (RFC 6455 §5.5.3)
	ctrlClose   []byte
	closeErr    error         // the error of the write that carried the close frame
	ctrlPending atomic.Bool   // a control frame waits
	closeDone   chan struct{} // closed once the close frame was written or its write failed

	client    bool          // this side dialled: its control frames are masked
	closeSent atomic.Bool   // a close frame was queued or written
	pong      chan struct{} // capacity 1: a pong arrived

	rmu       sync.Mutex // held by the one reader
	br        *bufio.Reader
	readLimit int64
	skip      int64 // payload bytes of a refused frame still to drop
	dropMsg   bool  // the fragments of a refused message are still to drop
	broken    bool  // a frame timed out mid-way: the stream cannot be parsed on
	closeSeen bool  // the peer's close frame was read (or CloseStatus gave up waiting)
	ctrl      [125]byte

	frameTimeout time.Duration // 0: a message may take any time to arrive
	frameRate    int64         // bytes/s a message must average past frameTimeout

	dmu     sync.Mutex // guards read deadlines, set by the reader and by CloseStatus
	closeBy time.Time  // CloseStatus's deadline: no read deadline goes past it
}

// New wraps c; writeTimeout 0 means socket writes have no deadline.
func New(c net.Conn, writeTimeout time.Duration) *Conn {
	return &Conn{Conn: c, writeTimeout: writeTimeout, pong: make(chan struct{}, 1), closeDone: make(chan struct{})}
}

// Write sends p with one socket write (handshake bytes), after the control frames waiting.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	n, err := 0, c.flushControlLocked()
	if err == nil {
		if c.closeWritten {
			err = ErrCloseSent
		} else {
			n, err = c.writeLocked(p)
		}
	}
	c.mu.Unlock()
	c.kickControl()
	return n, err
}

func (c *Conn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.flushControlLocked()
	if err == nil && c.closeSent.Load() {
		err = ErrCloseSent // RFC 6455 §5.5.1: no data frame after a close
	}
	if err == nil {
		_, err = c.writeLocked(c.buf)
	}
	if cap(c.buf) > 2*MaxHeld {
		c.buf = nil // a large message passed through; do not keep its memory
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

func (c *Conn) writeLocked(p []byte) (int, error) {
	if c.writeTimeout > 0 {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.writeTimeout)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// queueControl makes the control frame op (payload) wait for the next socket write, replacing
// one of the same opcode that still waits, and writes it at once when no write runs.
func (c *Conn) queueControl(op byte, payload []byte) {
	var key []byte
	if c.client {
		key = newMaskKey()
	}
	f := appendFrameOp(make([]byte, 0, 14+len(payload)), 0x80|op, payload, key)
	c.cmu.Lock()
	switch op {
	case opPing:
		c.ctrlPing = f
	case opPong:
		c.ctrlPong = f
	case opClose:
		c.ctrlClose = f
	}
	c.ctrlPending.Store(true)
	c.cmu.Unlock()
	c.kickControl()
}

// kickControl writes the waiting control frames unless another goroutine holds the socket for
// writing; that one writes them before its next write and, after it lets go, kicks again.
func (c *Conn) kickControl() {
	for c.ctrlPending.Load() && c.mu.TryLock() {
		_ = c.flushControlLocked()
		c.mu.Unlock()
	}
}

// flushControlLocked writes the waiting control frames with one socket write; c.mu is held.
func (c *Conn) flushControlLocked() error {
	if !c.ctrlPending.Load() {
		return nil
	}
	c.cmu.Lock()
	ping, pong, cl := c.ctrlPing, c.ctrlPong, c.ctrlClose
	c.ctrlPing, c.ctrlPong, c.ctrlClose = nil, nil, nil
	c.ctrlPending.Store(false)
	c.cmu.Unlock()
	if c.closeWritten {
		return ErrCloseSent
	}
	var a [3 * 131]byte
	_, err := c.writeLocked(append(append(append(a[:0], ping...), pong...), cl...))
	if cl != nil {
		c.closeWritten = true
		c.cmu.Lock()
		c.closeErr = err
		c.cmu.Unlock()
		close(c.closeDone)
	}
	return err
}

// sendClose queues the close frame with payload and waits at most wait for it to be written.
func (c *Conn) sendClose(payload []byte, wait time.Duration) error {
	c.queueControl(opClose, payload)
	select {
	case <-c.closeDone:
	default:
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-c.closeDone:
		case <-t.C:
			return errCloseNotWritten
		}
	}
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.closeErr
}

// Listener wraps every connection it accepts with New.
type Listener struct {
	net.Listener
	WriteTimeout time.Duration
}

// Accept waits for the next connection and wraps it.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return New(c, l.WriteTimeout), nil
}
