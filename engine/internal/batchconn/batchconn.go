// Package batchconn is the worker connection's WebSocket (RFC 6455, no extensions) on a raw
// net.Conn. One writer sends many frames with one socket write (WriteText), where a WebSocket
// library writes and flushes each message on its own: the sender makes one system call for the
// run and the peer wakes once for all of it. The reader (ReadMessage) parses frames from a
// buffered reader with no lock or timer per message, answering pings and closes itself. Accept
// and Dial do the handshakes (github.com/gobwas/ws); stream channels use coder/websocket.
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

	mu  sync.Mutex
	buf []byte // frames being gathered by WriteText

	client    bool          // this side dialled: its control frames are masked
	closeSent atomic.Bool   // a close frame was written
	pong      chan struct{} // capacity 1: a pong arrived

	rmu       sync.Mutex // held by the one reader
	br        *bufio.Reader
	readLimit int64
	skip      int64 // payload bytes of a refused frame still to drop
	closeSeen bool  // the peer's close frame was read (or CloseStatus gave up waiting)
	ctrl      [125]byte
}

// New wraps c; writeTimeout 0 means socket writes have no deadline.
func New(c net.Conn, writeTimeout time.Duration) *Conn {
	return &Conn{Conn: c, writeTimeout: writeTimeout, pong: make(chan struct{}, 1)}
}

// Write sends p with one socket write (handshake bytes, a control frame).
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(p)
}

func (c *Conn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.writeLocked(c.buf)
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
