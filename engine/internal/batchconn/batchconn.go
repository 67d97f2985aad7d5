// Package batchconn wraps a net.Conn so that one writer can gather many small writes into one
// socket write: between Hold and Flush, writes are kept in a buffer (flushed early once it
// holds MaxHeld bytes). A WebSocket library frames each message with its own flush; holding the
// connection around a run of messages sends them with one system call, and the peer wakes once
// for all of them.
package batchconn

import (
	"net"
	"sync"
	"time"
)

// MaxHeld is how many bytes a held connection buffers before it writes them anyway.
const MaxHeld = 64 << 10

// Conn is a net.Conn whose writes can be held back and sent together. Every socket write it
// makes has a deadline of WriteTimeout (when set), so a peer that does not read fails the write
// with os.ErrDeadlineExceeded instead of blocking its writer. It is safe for concurrent use.
type Conn struct {
	net.Conn
	writeTimeout time.Duration

	mu   sync.Mutex
	held bool
	buf  []byte
}

// New wraps c; writeTimeout 0 means socket writes have no deadline.
func New(c net.Conn, writeTimeout time.Duration) *Conn {
	return &Conn{Conn: c, writeTimeout: writeTimeout}
}

// Write sends p, or buffers it while the connection is held.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held || len(c.buf) > 0 {
		c.buf = append(c.buf, p...)
		if c.held && len(c.buf) < MaxHeld {
			return len(p), nil
		}
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.writeLocked(p)
}

// Hold buffers writes until Flush.
func (c *Conn) Hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// Flush ends a Hold and writes what it buffered in one socket write.
func (c *Conn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	return c.flushLocked()
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
