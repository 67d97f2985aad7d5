package batchconn

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
	"unicode/utf8"
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
	StatusInvalidPayload  = 1007
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

// ErrFrameTimeout is ReadMessage's error when a message did not arrive in time (SetFrameTimeout).
// The connection is left for the caller to close; nothing more can be read from it.
var ErrFrameTimeout = errors.New("batchconn: a message did not arrive in time")

// ErrCloseSent is the error of a write once the close frame was queued: RFC 6455 allows no
// data after it.
var ErrCloseSent = errors.New("batchconn: the close frame was sent")

// errClosing is what reads after the close handshake return.
var errClosing = errors.New("batchconn: connection closing")

var errCloseNotWritten = errors.New("batchconn: the close frame was not written in time")

// closeWait bounds how long the reader waits for its close frame (an answer, a protocol error's)
// to be written before it closes the socket.
const closeWait = time.Second

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
// status 1009, a text message that is not UTF-8 with 1007.
//
// Memory is taken as the payload arrives, not as frame headers declare it: the buffer grows
// (doubling, from 4 KiB) only once the bytes read so far fill it. hold, when set, is asked for
// every growth past the capacity of buf, which the caller already holds (a message that fits
// in buf asks nothing); when it refuses, ReadMessage returns ErrHeld (the caller gives back what
// it granted) and the next read drops the rest of that message. Only one goroutine may read at
// a time.
func (c *Conn) ReadMessage(buf []byte, hold func(n int) bool) (op byte, msg []byte, err error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closeSeen || c.broken {
		return 0, nil, errClosing
	}
	return c.readMessage(buf, hold, false)
}

// SetReadLimit sets the largest message ReadMessage accepts (0: no limit).
func (c *Conn) SetReadLimit(n int64) { c.readLimit = n }

// SetFrameTimeout bounds how long a message may take once its first frame header arrived: its
// bytes must all be in within timeout plus one second per minRate bytes read so far (a minimum
// average rate), or ReadMessage fails with ErrFrameTimeout. The time between messages is not
// bounded. timeout 0 (the default) turns the bound off.
func (c *Conn) SetFrameTimeout(timeout time.Duration, minRate int) {
	c.frameTimeout, c.frameRate = timeout, max(int64(minRate), 1)
}

// clock is the frame deadline of the message being read; its start is taken the first time a
// read of the message would wait for the socket, so messages already buffered cost no timer.
type clock struct {
	start time.Time
	armed bool
}

// arm sets the read deadline of a message of which arrived bytes were read, before a read that
// may wait.
func (c *Conn) arm(k *clock, arrived int) {
	if c.frameTimeout <= 0 {
		return
	}
	if k.start.IsZero() {
		k.start = time.Now()
	}
	a := int64(arrived)
	d := c.frameTimeout + time.Duration(a/c.frameRate)*time.Second + time.Duration(a%c.frameRate*int64(time.Second)/c.frameRate)
	c.setReadDeadline(k.start.Add(d))
	k.armed = true
}

// disarm clears the deadline arm set once the message is read.
func (c *Conn) disarm(k *clock) {
	if k.armed {
		c.setReadDeadline(time.Time{})
		k.armed = false
	}
}

// setReadDeadline sets the socket's read deadline, never past the one CloseStatus set.
func (c *Conn) setReadDeadline(t time.Time) {
	c.dmu.Lock()
	if !c.closeBy.IsZero() && (t.IsZero() || t.After(c.closeBy)) {
		t = c.closeBy
	}
	_ = c.Conn.SetReadDeadline(t)
	c.dmu.Unlock()
}

// readErr is the error of a failed socket read: ErrFrameTimeout when the message's deadline
// passed (and CloseStatus set none).
func (c *Conn) readErr(err error, k *clock, arrived int) error {
	if !k.armed || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	c.dmu.Lock()
	closing := !c.closeBy.IsZero()
	c.dmu.Unlock()
	if closing {
		return err
	}
	c.broken = true
	return fmt.Errorf("%w: %d bytes read in %s, the limit is %s plus 1 s per %d bytes",
		ErrFrameTimeout, arrived, time.Since(k.start).Round(time.Millisecond), c.frameTimeout, c.frameRate)
}

// maxHeader is the longest frame header: 2 bytes, a 64-bit length and a masking key.
const maxHeader = 14

// readMessage is ReadMessage once the connection is known open; with discard it reads and
// drops data frames, answering only control frames.
func (c *Conn) readMessage(buf []byte, hold func(int) bool, discard bool) (byte, []byte, error) {
	if err := c.skipHeld(); err != nil {
		return 0, nil, err
	}
	b := buf[:0]
	var op byte
	var k clock
	started := false
	valid := 0 // b[:valid] is checked UTF-8 (text messages)
	for {
		if (started || c.dropMsg) && c.br.Buffered() < maxHeader {
			c.arm(&k, len(b))
		}
		h, err := c.readHeader()
		if err != nil {
			return 0, nil, c.readErr(err, &k, len(b))
		}
		if h.op >= opClose {
			if err := c.control(h, &k, started, len(b)); err != nil {
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
		if err := c.checkSequence(h.op, started); err != nil {
			return 0, nil, err
		}
		if c.dropMsg { // a fragment of the message whose memory hold refused
			if _, err := c.br.Discard(int(h.n)); err != nil {
				return 0, nil, err
			}
			c.dropMsg = !h.fin
			continue
		}
		if !started {
			started, op = true, h.op
		}
		if b, valid, err = c.readPayload(b, &h, op, valid, &k, hold); err != nil {
			return 0, nil, err
		}
		if h.fin {
			if op == OpText && valid < len(b) {
				return 0, nil, c.fail(StatusInvalidPayload, "a text message that is not UTF-8")
			}
			c.disarm(&k)
			return op, b, nil
		}
	}
}

// skipHeld sets up the buffered reader on first use and drops the rest of a frame whose
// memory hold refused.
func (c *Conn) skipHeld() error {
	if c.br == nil {
		c.br = bufio.NewReaderSize(c.Conn, readBufSize)
	}
	if c.skip > 0 {
		if _, err := c.br.Discard(int(c.skip)); err != nil {
			return err
		}
		c.skip = 0
	}
	return nil
}

// checkSequence fails the connection (1002) on a data frame's opcode that is unknown or out of
// place: a continuation with no fragmented message begun, or a new message inside one (started,
// or one being dropped).
func (c *Conn) checkSequence(op byte, started bool) error {
	switch {
	case op != opContinuation && op != OpText && op != OpBinary:
		return c.fail(StatusProtocolError, fmt.Sprintf("unknown opcode %d", op))
	case op == opContinuation && !started && !c.dropMsg:
		return c.fail(StatusProtocolError, "continuation frame outside a fragmented message")
	case op != opContinuation && (started || c.dropMsg):
		return c.fail(StatusProtocolError, "new message inside a fragmented one")
	}
	return nil
}

// readPayload appends the payload of the data frame h to b, the message of opcode op read so
// far (of which b[:valid] is checked UTF-8), unmasking it and checking a text message's UTF-8 as
// it arrives, and returns b and valid. It fails the connection past the read limit (1009) or on
// bytes that are not UTF-8 (1007), and returns ErrHeld when hold refuses the buffer's growth.
func (c *Conn) readPayload(b []byte, h *header, op byte, valid int, k *clock, hold func(int) bool) ([]byte, int, error) {
	need := int64(len(b)) + h.n
	if c.readLimit > 0 && need > c.readLimit {
		return nil, valid, c.fail(StatusMessageTooBig, fmt.Sprintf("read limited at %d bytes", c.readLimit))
	}
	for off, left := 0, h.n; left > 0; {
		if len(b) == cap(b) {
			n := c.grow(cap(b), need, h.fin)
			if hold != nil && !hold(n-cap(b)) {
				c.skip, c.dropMsg = left, !h.fin
				c.disarm(k)
				return nil, valid, ErrHeld
			}
			nb := make([]byte, len(b), n)
			copy(nb, b)
			b = nb
		}
		start := len(b)
		n := int(min(left, int64(cap(b)-start)))
		if c.br.Buffered() < n {
			c.arm(k, start)
		}
		b = b[:start+n]
		if _, err := io.ReadFull(c.br, b[start:]); err != nil {
			return nil, valid, c.readErr(err, k, start)
		}
		if h.masked {
			maskBytesAt(b[start:], h.key[:], off)
		}
		off += n
		left -= int64(n)
		if op == OpText {
			var ok bool
			if valid, ok = checkUTF8(b, valid); !ok {
				return nil, valid, c.fail(StatusInvalidPayload, "a text message that is not UTF-8")
			}
		}
	}
	return b, valid, nil
}

// grow is the capacity the buffer of a message grows to from have, need bytes declared so far
// (last: by its final frame): double (from minBuf), so that a buffer reused for the next message
// or the next fragment rarely grows again, but never past the read limit, nor past the length
// of a whole message larger than MaxHeld (such a buffer is not kept for reuse).
func (c *Conn) grow(have int, need int64, last bool) int {
	n := max(2*int64(have), minBuf)
	if last && need > MaxHeld {
		n = min(n, need)
	}
	if c.readLimit > 0 {
		n = min(n, c.readLimit)
	}
	return int(n)
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
// answered (unless this side closed first) and returned as CloseError. inMsg tells that it came
// between the fragments of a message of which arrived bytes were read (its deadline runs).
func (c *Conn) control(h header, k *clock, inMsg bool, arrived int) error {
	if !h.fin || h.n > 125 {
		return c.fail(StatusProtocolError, "control frames must be final and at most 125 bytes")
	}
	p := c.ctrl[:h.n]
	if inMsg && c.br.Buffered() < len(p) {
		c.arm(k, arrived)
	}
	if _, err := io.ReadFull(c.br, p); err != nil {
		return c.readErr(err, k, arrived)
	}
	if h.masked {
		maskBytes(p, h.key[:])
	}
	switch h.op {
	case opPing:
		if !c.closeSent.Load() {
			c.queueControl(opPong, p)
		}
		return nil
	case opPong:
		select {
		case c.pong <- struct{}{}:
		default:
		}
		return nil
	case opClose:
		ce := CloseError{Code: StatusNoStatus}
		switch {
		case len(p) == 1:
			return c.fail(StatusProtocolError, "close frame with a one-byte payload")
		case len(p) >= 2:
			ce.Code = int(binary.BigEndian.Uint16(p))
			if !validCloseCode(ce.Code) {
				return c.fail(StatusProtocolError, fmt.Sprintf("close status %d is not one a peer may send", ce.Code))
			}
			if !utf8.Valid(p[2:]) {
				return c.fail(StatusInvalidPayload, "a close reason that is not UTF-8")
			}
			ce.Reason = string(p[2:])
		}
		c.closeSeen = true
		if c.closeSent.CompareAndSwap(false, true) {
			_ = c.sendClose(p[:min(len(p), 2)], closeWait) // echo the status (RFC 6455 §5.5.1)
		}
		return ce
	}
	return c.fail(StatusProtocolError, fmt.Sprintf("unknown opcode %d", h.op))
}

// validCloseCode reports whether a close frame may carry code (RFC 6455 §7.4, and the IANA
// registry's 1012–1014): 1005, 1006 and 1015 are never sent, 1016–2999 are unassigned, and
// 4000–4999 are for applications.
func validCloseCode(code int) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	default:
		return code >= 3000 && code <= 4999
	}
}

// checkUTF8 checks p[from:] for UTF-8 and reports up to where p holds whole valid runes: a
// rune cut by the end of p (continued in the next fragment) is left for the next check, as long
// as its first bytes can start one.
func checkUTF8(p []byte, from int) (int, bool) {
	q := p[from:]
	if utf8.Valid(q) {
		return len(p), true
	}
	i := len(q) - 1
	for i > 0 && i > len(q)-utf8.UTFMax && !utf8.RuneStart(q[i]) {
		i--
	}
	if i < 0 || !runePrefix(q[i:]) || !utf8.Valid(q[:i]) {
		return from, false
	}
	return from + i, true
}

// runePrefix reports whether t is the start, short of its last byte or more, of a valid UTF-8
// encoding of a rune (never an overlong form, a surrogate or past U+10FFFF).
func runePrefix(t []byte) bool {
	var n int
	lo, hi := byte(0x80), byte(0xbf) // the range of the second byte
	switch b := t[0]; {
	case b >= 0xc2 && b <= 0xdf:
		n = 2
	case b == 0xe0:
		n, lo = 3, 0xa0
	case b == 0xed:
		n, hi = 3, 0x9f
	case b >= 0xe1 && b <= 0xef:
		n = 3
	case b == 0xf0:
		n, lo = 4, 0x90
	case b == 0xf4:
		n, hi = 4, 0x8f
	case b >= 0xf1 && b <= 0xf3:
		n = 4
	default:
		return false
	}
	if len(t) >= n {
		return false
	}
	for i, b := range t[1:] {
		if i == 0 && (b < lo || b > hi) || i > 0 && (b < 0x80 || b > 0xbf) {
			return false
		}
	}
	return true
}

// fail closes the connection with status and reason after a protocol violation by the peer
// and returns the error ReadMessage reports for it.
func (c *Conn) fail(status int, reason string) error {
	if c.closeSent.CompareAndSwap(false, true) {
		_ = c.sendClose(closePayload(status, reason), closeWait)
	}
	_ = c.Conn.Close()
	return fmt.Errorf("batchconn: closed with status %d: %s", status, reason)
}

// closePayload is a close frame's payload: status and reason, the reason made UTF-8 and cut at
// a rune boundary to the 123 bytes a control frame leaves for it. A status no close frame may
// carry (1005, 1006, 1015, unassigned ones) gives an empty payload, a close without status.
func closePayload(status int, reason string) []byte {
	if !validCloseCode(status) {
		return nil
	}
	if !utf8.ValidString(reason) {
		reason = strings.ToValidUTF8(reason, "\uFFFD")
	}
	if len(reason) > maxCloseReason {
		i := maxCloseReason
		for i > 0 && !utf8.RuneStart(reason[i]) {
			i--
		}
		reason = reason[:i]
	}
	return append(binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), uint16(status)), reason...)
}

// maxCloseReason is the longest close reason: a control frame's 125 bytes less the status.
const maxCloseReason = 123

// CloseReason fits a close reason into a control frame: at most 120 bytes, valid UTF-8.
func CloseReason(s string) string {
	if len(s) > 120 {
		s = s[:120]
	}
	return strings.ToValidUTF8(s, "")
}

// CloseStatus sends a close frame with status and reason (unless one was sent), waits at most
// timeout for the peer's answer, reading and dropping data messages meanwhile when no
// ReadMessage runs, then closes the socket.
func (c *Conn) CloseStatus(status int, reason string, timeout time.Duration) error {
	if c.closeSent.CompareAndSwap(false, true) {
		if err := c.sendClose(closePayload(status, reason), timeout); err != nil {
			_ = c.Conn.Close()
			return err
		}
	}
	c.dmu.Lock()
	c.closeBy = time.Now().Add(timeout)
	_ = c.Conn.SetReadDeadline(c.closeBy)
	c.dmu.Unlock()
	c.rmu.Lock() // a running ReadMessage returns with the peer's close or at the deadline
	for !c.closeSeen && !c.broken {
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
	if c.closeSent.Load() {
		return ErrCloseSent
	}
	c.queueControl(opPing, nil)
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
