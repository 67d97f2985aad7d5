package batchconn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// tcpPair is a Conn (the side under test, a server unless client) and the raw socket of its
// peer, connected over loopback TCP.
func tcpPair(t testing.TB, client bool) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := New(s, 5*time.Second)
	c.client = client
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c, peer
}

// frame is one raw frame: first byte (FIN and opcode), payload, masked or not.
func frame(first byte, p string, masked bool) []byte {
	var key []byte
	if masked {
		key = []byte{1, 2, 3, 4}
	}
	return appendFrameOp(nil, first, []byte(p), key)
}

// readPeerFrame reads one unfragmented frame the Conn sent, unmasking it.
func readPeerFrame(t *testing.T, br *bufio.Reader) (op byte, p []byte) {
	t.Helper()
	h := make([]byte, 2)
	if _, err := br.Read(h[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := br.Read(h[1:]); err != nil {
		t.Fatal(err)
	}
	n := int(h[1] & 0x7f)
	if n >= 126 {
		t.Fatalf("unexpected long frame from the Conn")
	}
	var key []byte
	if h[1]&0x80 != 0 {
		key = make([]byte, 4)
		if _, err := readFull(br, key); err != nil {
			t.Fatal(err)
		}
	}
	p = make([]byte, n)
	if _, err := readFull(br, p); err != nil {
		t.Fatal(err)
	}
	if key != nil {
		maskBytes(p, key)
	}
	return h[0] & 0x0f, p
}

func readFull(br *bufio.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := br.Read(p[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestReadFragmentsAndPing: fragments are joined across a ping in the middle, which is answered
// with a pong carrying its payload; all three length forms read.
func TestReadFragmentsAndPing(t *testing.T) {
	c, peer := tcpPair(t, false)
	long := strings.Repeat("L", 70000)
	var in bytes.Buffer
	in.Write(frame(OpText, "hel", true))                // FIN clear: more follows
	in.Write(frame(0x80|opPing, "are you there", true)) // control frame between fragments
	in.Write(frame(opContinuation, strings.Repeat("m", 300), true))
	in.Write(frame(0x80|opContinuation, "lo", true))
	in.Write(frame(0x80|OpBinary, long, true))
	go func() { _, _ = peer.Write(in.Bytes()) }()
	op, b, err := c.ReadMessage(nil, nil)
	if err != nil || op != OpText || string(b) != "hel"+strings.Repeat("m", 300)+"lo" {
		t.Fatalf("fragmented message: op %d, %d bytes, %v", op, len(b), err)
	}
	op, b, err = c.ReadMessage(b, nil)
	if err != nil || op != OpBinary || string(b) != long {
		t.Fatalf("64-bit length binary message: op %d, %d bytes, %v", op, len(b), err)
	}
	pop, p := readPeerFrame(t, bufio.NewReader(peer))
	if pop != opPong || string(p) != "are you there" {
		t.Fatalf("answer to the ping: op %d %q", pop, p)
	}
}

// TestReadMaskRule: a server closes with 1002 on an unmasked frame, a client on a masked one
// (RFC 6455 §5.1).
func TestReadMaskRule(t *testing.T) {
	for _, client := range []bool{false, true} {
		c, peer := tcpPair(t, client)
		go func() { _, _ = peer.Write(frame(0x80|OpText, "hi", client)) }()
		if _, _, err := c.ReadMessage(nil, nil); err == nil || !strings.Contains(err.Error(), "status 1002") {
			t.Fatalf("client %v: got %v, want a 1002 close", client, err)
		}
		op, p := readPeerFrame(t, bufio.NewReader(peer))
		if op != opClose || binary.BigEndian.Uint16(p) != StatusProtocolError {
			t.Fatalf("client %v: close sent: op %d %q", client, op, p)
		}
	}
}

// TestReadClose: the peer's close is answered with its status and returned as CloseError.
func TestReadClose(t *testing.T) {
	c, peer := tcpPair(t, true)
	go func() { _, _ = peer.Write(frame(0x80|opClose, string(closePayload(StatusGoingAway, "bye")), false)) }()
	_, _, err := c.ReadMessage(nil, nil)
	var ce CloseError
	if !errors.As(err, &ce) || ce.Code != StatusGoingAway || ce.Reason != "bye" {
		t.Fatalf("got %v, want CloseError 1001 bye", err)
	}
	op, p := readPeerFrame(t, bufio.NewReader(peer))
	if op != opClose || binary.BigEndian.Uint16(p) != StatusGoingAway {
		t.Fatalf("answer to the close: op %d %q", op, p)
	}
	if _, _, err := c.ReadMessage(nil, nil); err == nil {
		t.Fatal("a read after the close handshake succeeded")
	}
}

// TestReadLimit: a message over the limit closes the connection with 1009.
func TestReadLimit(t *testing.T) {
	c, peer := tcpPair(t, false)
	c.SetReadLimit(10)
	go func() {
		_, _ = peer.Write(frame(OpText, "123456", true))
		_, _ = peer.Write(frame(0x80|opContinuation, "78901", true))
	}()
	if _, _, err := c.ReadMessage(nil, nil); err == nil || !strings.Contains(err.Error(), "1009") {
		t.Fatalf("got %v, want a 1009 close", err)
	}
	op, p := readPeerFrame(t, bufio.NewReader(peer))
	if op != opClose || binary.BigEndian.Uint16(p) != StatusMessageTooBig {
		t.Fatalf("close sent: op %d %q", op, p)
	}
}

// TestReadProtocolErrors: reserved bits, a stray continuation and an unknown opcode close
// with 1002.
func TestReadProtocolErrors(t *testing.T) {
	for name, f := range map[string][]byte{
		"reserved bit": frame(0x80|0x40|OpText, "x", true),
		"continuation": frame(0x80|opContinuation, "x", true),
		"opcode 3":     frame(0x80|3, "x", true),
		"long control": frame(0x80|opPing, strings.Repeat("p", 126), true),
	} {
		c, peer := tcpPair(t, false)
		go func() { _, _ = peer.Write(f) }()
		if _, _, err := c.ReadMessage(nil, nil); err == nil || !strings.Contains(err.Error(), "1002") {
			t.Fatalf("%s: got %v, want a 1002 close", name, err)
		}
	}
}

// TestHoldRefusedThenCloseStatus: a refused hold fails the read with ErrHeld once the held
// buffer is full; CloseStatus then drops the rest and waits for the peer's close.
func TestHoldRefusedThenCloseStatus(t *testing.T) {
	c, peer := tcpPair(t, false)
	var asked []int
	hold := func(n int) bool { asked = append(asked, n); return n < 1000 }
	go func() { _, _ = peer.Write(frame(0x80|OpText, strings.Repeat("x", 5000), true)) }()
	if _, _, err := c.ReadMessage(make([]byte, 0, 100), hold); !errors.Is(err, ErrHeld) {
		t.Fatalf("got %v, want ErrHeld", err)
	}
	if len(asked) != 1 || asked[0] != minBuf-100 {
		t.Fatalf("hold asked for %v, want [%d] (the growth past the buffer the caller holds, once it is full)", asked, minBuf-100)
	}
	answered := make(chan error, 1)
	go func() {
		br := bufio.NewReader(peer)
		op, p := readPeerFrame(t, br)
		if op != opClose || binary.BigEndian.Uint16(p) != StatusTryAgainLater || string(p[2:]) != "busy" {
			answered <- errors.New("unexpected close frame")
			return
		}
		_, err := peer.Write(frame(0x80|opClose, string(p[:2]), true))
		answered <- err
	}()
	if err := c.CloseStatus(StatusTryAgainLater, "busy", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if !c.closeSeen {
		t.Fatal("CloseStatus returned without the peer's close")
	}
}

// TestInterop: Accept and Dial talk to coder/websocket's client and server: messages both ways
// (a fragmented one included), pings, and close statuses.
func TestInterop(t *testing.T) {
	accepted := make(chan *Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, 5*time.Second)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- c
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failure guard only
	defer cancel()
	cl, _, err := websocket.Dial(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.CloseNow()
	s := <-accepted
	w, err := cl.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"one ", strings.Repeat("two ", 5000), "three"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	op, b, err := s.ReadMessage(nil, nil)
	if err != nil || op != OpText || string(b) != "one "+strings.Repeat("two ", 5000)+"three" {
		t.Fatalf("message from coder's client: op %d, %d bytes, %v", op, len(b), err)
	}
	go func() { _ = s.WriteText([][]byte{[]byte("a"), []byte("b")}, false) }()
	for _, want := range []string{"a", "b"} {
		if _, got, err := cl.Read(ctx); err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	sread := make(chan error, 1)
	go func() { _, _, err := s.ReadMessage(nil, nil); sread <- err }() // answers pings
	cread := make(chan error, 1)
	go func() { cread <- readErr(ctx, cl) }() // coder sees pongs and closes while it reads
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("coder's ping: %v", err)
	}
	if err := s.CloseStatus(StatusPolicyViolation, "go away", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := websocket.CloseStatus(<-cread); got != StatusPolicyViolation {
		t.Fatalf("coder saw status %d, want %d", got, StatusPolicyViolation)
	}
	var ce CloseError
	if err := <-sread; !errors.As(err, &ce) || ce.Code != StatusPolicyViolation {
		t.Fatalf("the reader running during CloseStatus: %v, want coder's answer to the close", err)
	}

	// The client side against coder's server.
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t" {
			http.Error(w, "error[TOKEN_INVALID]: no", http.StatusForbidden)
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if string(b) == "close" {
				c.Close(websocket.StatusTryAgainLater, "later")
				return
			}
			_ = c.Write(ctx, typ, b)
		}
	}))
	defer srv2.Close()
	url := "ws" + strings.TrimPrefix(srv2.URL, "http")
	if _, err := Dial(ctx, url, nil); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "TOKEN_INVALID") {
		t.Fatalf("refused handshake: %v", err)
	}
	dc, err := Dial(ctx, url, http.Header{"Authorization": {"Bearer t"}})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	big := strings.Repeat("z", 100000)
	if err := dc.WriteText([][]byte{[]byte("hi"), []byte(big)}, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hi", big} {
		if _, b, err := dc.ReadMessage(nil, nil); err != nil || string(b) != want {
			t.Fatalf("echo: %d bytes, %v", len(b), err)
		}
	}
	dread := make(chan error, 1)
	go func() { // sees the pong, then the close
		for {
			if _, _, err := dc.ReadMessage(nil, nil); err != nil {
				dread <- err
				return
			}
		}
	}()
	if err := dc.Ping(5 * time.Second); err != nil {
		t.Fatalf("our ping: %v", err)
	}
	if err := dc.WriteText([][]byte{[]byte("close")}, true); err != nil {
		t.Fatal(err)
	}
	if err := <-dread; !errors.As(err, &ce) || ce.Code != StatusTryAgainLater || ce.Reason != "later" {
		t.Fatalf("got %v, want CloseError 1013 later", err)
	}
}

func readErr(ctx context.Context, c *websocket.Conn) error {
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return err
		}
	}
}
