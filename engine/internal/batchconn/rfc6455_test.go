package batchconn

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/iii-go/iii/internal/base/poll"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// readAnyFrame reads one frame the Conn sent (any length), unmasking it.
func readAnyFrame(br *bufio.Reader) (op byte, p []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		_, err = io.ReadFull(br, l[:])
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		_, err = io.ReadFull(br, l[:])
		n = binary.BigEndian.Uint64(l[:])
	}
	if err != nil {
		return 0, nil, err
	}
	var key []byte
	if h[1]&0x80 != 0 {
		key = make([]byte, 4)
		if _, err := io.ReadFull(br, key); err != nil {
			return 0, nil, err
		}
	}
	p = make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return 0, nil, err
	}
	if key != nil {
		maskBytes(p, key)
	}
	return h[0] & 0x0f, p, nil
}

// closeFrame is a masked close frame with status code and reason.
func closeFrame(code int, reason string) []byte {
	p := binary.BigEndian.AppendUint16(nil, uint16(code))
	return frame(0x80|opClose, string(p)+reason, true)
}

// peerClose reads frames until the Conn's close and returns its payload.
func peerClose(t *testing.T, br *bufio.Reader) []byte {
	t.Helper()
	for {
		op, p, err := readAnyFrame(br)
		if err != nil {
			t.Fatalf("reading the close: %v", err)
		}
		if op == opClose {
			return p
		}
	}
}

// TestCloseCodes (review N8, row B6): a close with a status a peer may not send is answered
// 1002; a valid one is echoed. RFC 6455 §7.4.
func TestCloseCodes(t *testing.T) {
	for _, code := range []int{0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535} {
		c, peer := tcpPair(t, false)
		go func() { _, _ = peer.Write(closeFrame(code, "")) }()
		if _, _, err := c.ReadMessage(nil, nil); err == nil || !strings.Contains(err.Error(), "status 1002") {
			t.Errorf("close %d: got %v, want a 1002 close", code, err)
		}
		if p := peerClose(t, bufio.NewReader(peer)); len(p) < 2 || binary.BigEndian.Uint16(p) != 1002 {
			t.Errorf("close %d answered with %q, want status 1002", code, p)
		}
	}
	for _, code := range []int{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999} {
		c, peer := tcpPair(t, false)
		go func() { _, _ = peer.Write(closeFrame(code, "r")) }()
		var ce CloseError
		if _, _, err := c.ReadMessage(nil, nil); !errors.As(err, &ce) || ce.Code != code || ce.Reason != "r" {
			t.Errorf("close %d: got %v, want CloseError %d", code, err, code)
		}
		if p := peerClose(t, bufio.NewReader(peer)); len(p) != 2 || int(binary.BigEndian.Uint16(p)) != code {
			t.Errorf("close %d answered with %q, want it echoed", code, p)
		}
	}
}

// TestNeverSendsReservedStatus: 1005, 1006 and 1015 are never put in a close frame (RFC 6455
// §7.4.1); CloseStatus with one sends a close without status.
func TestNeverSendsReservedStatus(t *testing.T) {
	for _, code := range []int{1005, 1006, 1015, 0, 5000} {
		c, peer := tcpPair(t, false)
		done := make(chan []byte, 1)
		go func() {
			br := bufio.NewReader(peer)
			p := peerClose(t, br)
			_, _ = peer.Write(frame(0x80|opClose, "", true))
			done <- p
		}()
		_ = c.CloseStatus(code, "reason", 5*time.Second)
		if p := <-done; len(p) != 0 {
			t.Errorf("CloseStatus(%d) sent %q, want a close without status", code, p)
		}
	}
}

// TestInvalidUTF8 (review N8, row B7): a text message or a close reason that is not UTF-8 fails
// the connection with 1007 (RFC 6455 §8.1); binary messages are not checked.
func TestInvalidUTF8(t *testing.T) {
	for name, in := range map[string][]byte{
		"text":                  frame(0x80|OpText, "{\xff\xfe}", true),
		"text with valid JSON":  frame(0x80|OpText, `{"type":"ping","x":"`+"\xff\xfe"+`"}`, true),
		"surrogate":             frame(0x80|OpText, "\xed\xa0\x80", true),
		"overlong":              frame(0x80|OpText, "\xc0\xaf", true),
		"cut at the end":        frame(0x80|OpText, "ab\xce", true),
		"cut before a fragment": append(frame(OpText, "ab\xce", true), frame(0x80|opContinuation, "x", true)...),
		"close reason":          closeFrame(1000, "\xff"),
	} {
		c, peer := tcpPair(t, false)
		go func() { _, _ = peer.Write(in) }()
		if _, _, err := c.ReadMessage(nil, nil); err == nil || !strings.Contains(err.Error(), "status 1007") {
			t.Errorf("%s: got %v, want a 1007 close", name, err)
			continue
		}
		if p := peerClose(t, bufio.NewReader(peer)); len(p) < 2 || binary.BigEndian.Uint16(p) != 1007 {
			t.Errorf("%s: close sent %q, want 1007", name, p)
		}
	}
}

// TestUTF8AcrossFragments: a rune split across fragments (and across the reader's chunks) is
// valid; binary messages may hold any bytes.
func TestUTF8AcrossFragments(t *testing.T) {
	c, peer := tcpPair(t, false)
	long := strings.Repeat("κόσμε", 3000) // 33 000 bytes: read in several chunks
	var in bytes.Buffer
	in.Write(frame(OpText, "\xce", true))
	in.Write(frame(opContinuation, "\xba\xe1", true))
	in.Write(frame(0x80|opContinuation, "\xbd\xb9", true))
	in.Write(frame(OpText, long[:4097], true)) // cut inside a rune
	in.Write(frame(0x80|opContinuation, long[4097:], true))
	in.Write(frame(0x80|OpBinary, "\xff\xfe", true))
	go func() { _, _ = peer.Write(in.Bytes()) }()
	for _, want := range []string{"\xce\xba\xe1\xbd\xb9", long, "\xff\xfe"} {
		_, b, err := c.ReadMessage(nil, nil)
		if err != nil || string(b) != want {
			t.Fatalf("got %d bytes, %v; want %d bytes", len(b), err, len(want))
		}
	}
}

// TestNoDataAfterClose: once the close frame went out, WriteText sends nothing more (RFC 6455
// §5.5.1) and fails.
func TestNoDataAfterClose(t *testing.T) {
	c, peer := tcpPair(t, false)
	go func() { _, _ = peer.Write(closeFrame(1000, "")) }()
	if _, _, err := c.ReadMessage(nil, nil); err == nil {
		t.Fatal("the peer's close was not returned")
	}
	if err := c.WriteText([][]byte{[]byte("after the close")}, false); err == nil {
		t.Error("WriteText after the close frame succeeded")
	}
	c.Close()
	br := bufio.NewReader(peer)
	if op, _, err := readAnyFrame(br); err != nil || op != opClose {
		t.Fatalf("first frame: op %d, %v; want the close", op, err)
	}
	if op, p, err := readAnyFrame(br); err == nil {
		t.Fatalf("a frame after the close: op %d %q", op, p)
	}
}

// TestClosePayloadRuneBoundary: a long close reason is cut to 123 bytes at a rune boundary,
// so that the peer reads valid UTF-8.
func TestClosePayloadRuneBoundary(t *testing.T) {
	p := closePayload(StatusPolicyViolation, strings.Repeat("é", 100))
	if len(p) > 125 || !utf8.Valid(p[2:]) || len(p[2:]) != 122 {
		t.Fatalf("payload of %d bytes, reason valid UTF-8: %v", len(p), utf8.Valid(p[2:]))
	}
}

// TestReadAfterHeldFragment: after hold refused the first fragment of a message, the next read
// drops the rest of it and returns the next message, instead of a false 1002 for its
// continuation frames.
func TestReadAfterHeldFragment(t *testing.T) {
	c, peer := tcpPair(t, false)
	var in bytes.Buffer
	in.Write(frame(OpText, strings.Repeat("x", 5000), true))
	in.Write(frame(opContinuation, "more", true))
	in.Write(frame(0x80|opContinuation, "end", true))
	in.Write(frame(0x80|OpText, "next", true))
	go func() { _, _ = peer.Write(in.Bytes()) }()
	refuse := func(int) bool { return false }
	if _, _, err := c.ReadMessage(make([]byte, 0, 100), refuse); !errors.Is(err, ErrHeld) {
		t.Fatalf("got %v, want ErrHeld", err)
	}
	if _, b, err := c.ReadMessage(nil, nil); err != nil || string(b) != "next" {
		t.Fatalf("the next read: %q, %v; want \"next\"", b, err)
	}
}

// TestControlFramesNotBehindWriter: while the writer is stuck in a long run of frames to a peer
// that does not read yet, the reader answers a ping without waiting for it and reads on, and
// the pong goes out between the run's socket writes, before the run ends.
func TestControlFramesNotBehindWriter(t *testing.T) {
	c, peer := tcpPair(t, false)
	c.writeTimeout = 20 * time.Second // failure guard only
	run := make([][]byte, 512)        // 32 MiB: more than the sockets buffer
	for i := range run {
		run[i] = bytes.Repeat([]byte{'d'}, 64<<10)
	}
	written := make(chan error, 1)
	go func() { written <- c.WriteText(run, false) }()
	writing := func() bool { // the writer holds the socket
		if c.mu.TryLock() {
			c.mu.Unlock()
			return false
		}
		return true
	}
	if !poll.Until(10*time.Second, writing) {
		t.Fatal("the writer never started")
	}
	go func() {
		_, _ = peer.Write(append(frame(0x80|opPing, "p", true), frame(0x80|OpText, "after the ping", true)...))
	}()
	read := make(chan error, 1)
	go func() {
		_, b, err := c.ReadMessage(nil, nil)
		if err == nil && string(b) != "after the ping" {
			err = errors.New("wrong message " + string(b))
		}
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-written:
		t.Fatalf("the reader waited for the writer's whole run (WriteText: %v)", err)
	}
	br := bufio.NewReaderSize(peer, 1<<20)
	frames, pongAt := 0, -1
	for frames < len(run)+1 {
		op, p, err := readAnyFrame(br)
		if err != nil {
			t.Fatal(err)
		}
		if op == opPong {
			if string(p) != "p" {
				t.Fatalf("pong %q", p)
			}
			pongAt = frames
		}
		frames++
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if pongAt < 0 || pongAt >= len(run) {
		t.Fatalf("the pong came as frame %d of %d, want it before the run ended", pongAt, frames)
	}
	t.Logf("the pong went out after %d of the run's %d frames", pongAt, len(run))
}
