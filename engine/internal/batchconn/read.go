package batchconn

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Opcodes of the data messages ReadMessage returns (RFC 6455 §5.2).
const (
	OpText   = 1
	OpBinary = 2

	opContinuation = 0
	opClose        = 8
	opPing         = 9
	opPong         = 10
)

// Close status codes (RFC 6455 §7.4.1) the engine and the SDK send or read.
const (
	StatusNormalClosure   = 1000
	StatusGoingAway       = 1001
	StatusProtocolError   = 1002
	StatusNoStatus        = 1005 // the peer's close frame carried no status
	StatusPolicyViolation = 1008
	StatusMessageTooBig   = 1009
	StatusTryAgainLater   = 1013
)

// CloseError is the close frame the peer sent; ReadMessage returns it once the close was answered.
type CloseError struct {
	Code   int
	Reason string
}

func (e CloseError) Error() string {
	return fmt.Sprintf("WebSocket closed by the peer: status %d, reason %q", e.Code, e.Reason)
}

// ErrHeld is ReadMessage's error when its hold function refused memory for a message.
var ErrHeld = errors.New("batchconn: no memory held for the message")

// errClosing is what reads after the close handshake return.
var errClosing = errors.New("batchconn: connection closing")

// header is one frame header.
type header struct {
	fin    bool
	op     byte
	masked bool
	key    [4]byte
	n      int64 // payload length
}

// ReadMessage reads the next data message (text or binary, its fragments joined) into buf's
// memory, answering pings with pongs and a close frame with a close (then returning CloseError)
// on the way. A message longer than the read limit (SetReadLimit) closes the connection with
// status 1009. hold, when set, is asked for the memory a message takes before it is taken: the
// capacity of buf when the message starts, then every growth; when it refuses, ReadMessage
// returns ErrHeld (the caller gives back what it granted). Only one goroutine may read at a
// time.
func (c *Conn) ReadMessage(buf []byte, hold func(n int) bool) (op byte, msg []byte, err error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closeSeen {
		return 0, nil, errClosing
	}
	return c.readMessage(buf, hold, false)
}

// SetReadLimit sets the largest message ReadMessage accepts (0: no limit).
func (c *Conn) SetReadLimit(n int64) { c.readLimit = n }

func (c *Conn) readMessage(buf []byte, hold func(int) bool, discard bool) (byte, []byte, error) {
	if c.br == nil {
		c.br = bufio.NewReaderSize(c.Conn, readBufSize)
	}
	if c.skip > 0 { // the rest of a frame whose memory hold refused
		if _, err := c.br.Discard(int(c.skip)); err != nil {
			return 0, nil, err
		}
		c.skip = 0
	}
	b := buf[:0]
	var op byte
	started := false
	for {
		h, err := c.readHeader()
		if err != nil {
			return 0, nil, err
		}
		if h.op >= opClose {
			if err := c.control(h); err != nil {
				return 0, nil, err
			}
			continue
		}
		if discard {
			if _, err := c.br.Discard(int(h.n)); err != nil {
				return 0, nil, err
			}
			continue
		}
		switch {
		case h.op != opContinuation && h.op != OpText && h.op != OpBinary:
			return 0, nil, c.fail(StatusProtocolError, fmt.Sprintf("unknown opcode %d", h.op))
		case h.op == opContinuation && !started:
			return 0, nil, c.fail(StatusProtocolError, "continuation frame outside a fragmented message")
		case h.op != opContinuation && started:
			return 0, nil, c.fail(StatusProtocolError, "new message inside a fragmented one")
		}
		if !started {
			started, op = true, h.op
			if cap(b) > 0 && hold != nil && !hold(cap(b)) {
				c.skip = h.n
				return 0, nil, ErrHeld
			}
		}
		need := int64(len(b)) + h.n
		if c.readLimit > 0 && need > c.readLimit {
			return 0, nil, c.fail(StatusMessageTooBig, fmt.Sprintf("read limited at %d bytes", c.readLimit))
		}
		if need > int64(cap(b)) {
			// Grow geometrically (from minBuf), so that a buffer reused for the next message
			// or the next fragment rarely grows again.
			n := max(need, 2*int64(cap(b)), minBuf)
			if c.readLimit > 0 {
				n = max(need, min(n, c.readLimit))
			}
			if hold != nil && !hold(int(n)-cap(b)) {
				c.skip = h.n
				return 0, nil, ErrHeld
			}
			nb := make([]byte, len(b), n)
			copy(nb, b)
			b = nb
		}
		start := len(b)
		b = b[:start+int(h.n)]
		if _, err := io.ReadFull(c.br, b[start:]); err != nil {
			return 0, nil, err
		}
		if h.masked {
			maskBytes(b[start:], h.key[:])
		}
		if h.fin {
			return op, b, nil
		}
	}
}

// readHeader reads one frame header from the buffered reader.
func (c *Conn) readHeader() (h header, err error) {
	p, err := c.br.Peek(2)
	if err != nil {
		return h, err
	}
	if p[0]&0x70 != 0 {
		return h, c.fail(StatusProtocolError, "reserved bits set: no extension was negotiated")
	}
	h.fin, h.op, h.masked = p[0]&0x80 != 0, p[0]&0x0f, p[1]&0x80 != 0
	if h.masked == c.client { // RFC 6455 §5.1: clients mask every frame, servers none
		if c.client {
			return h, c.fail(StatusProtocolError, "the server sent a masked frame")
		}
		return h, c.fail(StatusProtocolError, "the client sent an unmasked frame")
	}
	size := 2
	switch p[1] & 0x7f {
	case 126:
		size += 2
	case 127:
		size += 8
	}
	if h.masked {
		size += 4
	}
	if p, err = c.br.Peek(size); err != nil {
		return h, err
	}
	switch n := p[1] & 0x7f; n {
	case 126:
		h.n, p = int64(binary.BigEndian.Uint16(p[2:])), p[4:]
	case 127:
		u := binary.BigEndian.Uint64(p[2:])
		if u > 1<<62 {
			return h, c.fail(StatusProtocolError, "frame length out of range")
		}
		h.n, p = int64(u), p[10:]
	default:
		h.n, p = int64(n), p[2:]
	}
	if h.masked {
		copy(h.key[:], p)
	}
	_, err = c.br.Discard(size)
	return h, err
}

// control handles a control frame: ping is answered with pong, pong wakes Ping, close is
// answered (unless this side closed first) and returned as CloseError.
func (c *Conn) control(h header) error {
	if !h.fin || h.n > 125 {
		return c.fail(StatusProtocolError, "control frames must be final and at most 125 bytes")
	}
	p := c.ctrl[:h.n]
	if _, err := io.ReadFull(c.br, p); err != nil {
		return err
	}
	if h.masked {
		maskBytes(p, h.key[:])
	}
	switch h.op {
	case opPing:
		return c.writeControl(opPong, p)
	case opPong:
		select {
		case c.pong <- struct{}{}:
		default:
		}
		return nil
	case opClose:
		ce := CloseError{Code: StatusNoStatus}
		if len(p) == 1 {
			return c.fail(StatusProtocolError, "close frame with a one-byte payload")
		}
		if len(p) >= 2 {
			ce.Code, ce.Reason = int(binary.BigEndian.Uint16(p)), string(p[2:])
		}
		c.closeSeen = true
		if c.closeSent.CompareAndSwap(false, true) {
			_ = c.writeControl(opClose, p[:min(len(p), 2)]) // echo the status (RFC 6455 §5.5.1)
		}
		return ce
	}
	return c.fail(StatusProtocolError, fmt.Sprintf("unknown opcode %d", h.op))
}

// fail closes the connection with status and reason after a protocol violation by the peer
// and returns the error ReadMessage reports for it.
func (c *Conn) fail(status int, reason string) error {
	if c.closeSent.CompareAndSwap(false, true) {
		_ = c.writeControl(opClose, closePayload(status, reason))
	}
	_ = c.Conn.Close()
	return fmt.Errorf("batchconn: closed with status %d: %s", status, reason)
}

// writeControl writes one control frame with one socket write, masked when this side is the
// client.
func (c *Conn) writeControl(op byte, payload []byte) error {
	var key []byte
	if c.client {
		key = make([]byte, 4)
		_, _ = rand.Read(key) // never fails (crypto/rand)
	}
	frame := appendFrameOp(make([]byte, 0, 14+len(payload)), 0x80|op, payload, key)
	_, err := c.Write(frame)
	return err
}

// closePayload is a close frame's payload: status and reason, cut to the 123 bytes a control
// frame leaves for it.
func closePayload(status int, reason string) []byte {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	return append(binary.BigEndian.AppendUint16(nil, uint16(status)), reason...)
}

// CloseStatus sends a close frame with status and reason (unless one was sent), waits at most
// timeout for the peer's answer, reading and dropping data messages meanwhile when no
// ReadMessage runs, then closes the socket.
func (c *Conn) CloseStatus(status int, reason string, timeout time.Duration) error {
	if c.closeSent.CompareAndSwap(false, true) {
		if err := c.writeControl(opClose, closePayload(status, reason)); err != nil {
			_ = c.Conn.Close()
			return err
		}
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(timeout))
	c.rmu.Lock() // a running ReadMessage returns with the peer's close or at the deadline
	for !c.closeSeen {
		if _, _, err := c.readMessage(nil, nil, true); err != nil {
			break
		}
	}
	c.closeSeen = true
	c.rmu.Unlock()
	return c.Conn.Close()
}

// Ping sends a ping and waits for a pong (any pong, as RFC 6455 allows) until the deadline
// d passes. A ReadMessage loop must be running: it sees the pong.
func (c *Conn) Ping(d time.Duration) error {
	select {
	case <-c.pong: // a stale pong
	default:
	}
	if err := c.writeControl(opPing, nil); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.pong:
		return nil
	case <-t.C:
		return fmt.Errorf("no pong within %s", d)
	}
}

// newReader is the buffered reader of conn, whose handshake (or proxy tunnel) may have left
// bytes of the peer's first frames in br (nil when none).
func newReader(conn net.Conn, br *bufio.Reader) *bufio.Reader {
	return bufio.NewReaderSize(withPending(conn, br), readBufSize)
}

const (
	readBufSize = 8 << 10 // the size of a connection's read buffer
	minBuf      = 4 << 10 // the smallest message buffer ReadMessage allocates
)

// withPending is conn, first yielding the bytes of the peer that br read ahead of what its
// reader consumed (br nil: none).
func withPending(conn net.Conn, br *bufio.Reader) net.Conn {
	if br == nil || br.Buffered() == 0 {
		return conn
	}
	pending, _ := br.Peek(br.Buffered())
	return &prefixConn{Conn: conn, pending: append([]byte(nil), pending...)}
}

// prefixConn yields pending bytes before it reads the connection.
type prefixConn struct {
	net.Conn
	pending []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
