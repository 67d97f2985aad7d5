package batchconn

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// countConn records the socket writes it gets.
type countConn struct {
	net.Conn
	writes [][]byte
}

func (c *countConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (c *countConn) SetWriteDeadline(time.Time) error { return nil }

// parseFrames splits b into the payloads of final text frames, unmasking them, and reports
// whether each was masked.
func parseFrames(t *testing.T, b []byte) (payloads [][]byte, masked []bool) {
	t.Helper()
	for len(b) > 0 {
		if b[0] != 0x81 {
			t.Fatalf("first byte %#x, want 0x81 (FIN, text)", b[0])
		}
		m := b[1]&0x80 != 0
		n := int(b[1] & 0x7f)
		b = b[2:]
		switch n {
		case 126:
			n = int(binary.BigEndian.Uint16(b))
			b = b[2:]
		case 127:
			n = int(binary.BigEndian.Uint64(b))
			b = b[8:]
		}
		var key []byte
		if m {
			key, b = b[:4], b[4:]
		}
		p := append([]byte(nil), b[:n]...)
		for i := range p {
			if m {
				p[i] ^= key[i%4]
			}
		}
		payloads, masked, b = append(payloads, p), append(masked, m), b[n:]
	}
	return payloads, masked
}

func TestWriteTextOneSocketWrite(t *testing.T) {
	for _, mask := range []bool{false, true} {
		cc := &countConn{}
		c := New(cc, time.Second)
		var in [][]byte
		for _, n := range []int{0, 1, 7, 125, 126, 1000, 40000} {
			in = append(in, bytes.Repeat([]byte{byte('a' + n%26)}, n))
		}
		if err := c.WriteText(in, mask); err != nil {
			t.Fatal(err)
		}
		if len(cc.writes) != 1 {
			t.Fatalf("mask=%v: %d socket writes, want 1", mask, len(cc.writes))
		}
		got, masked := parseFrames(t, bytes.Join(cc.writes, nil))
		if len(got) != len(in) {
			t.Fatalf("mask=%v: %d frames, want %d", mask, len(got), len(in))
		}
		for i := range in {
			if !bytes.Equal(got[i], in[i]) || masked[i] != mask {
				t.Fatalf("mask=%v: frame %d differs (masked %v)", mask, i, masked[i])
			}
		}
	}
}

func TestWriteTextLargeFrame(t *testing.T) {
	cc := &countConn{}
	c := New(cc, 0)
	in := [][]byte{bytes.Repeat([]byte("x"), 70000), []byte("small")}
	if err := c.WriteText(in, true); err != nil {
		t.Fatal(err)
	}
	if len(cc.writes) != 2 { // the first frame passes MaxHeld and is written on its own
		t.Fatalf("%d socket writes, want 2", len(cc.writes))
	}
	got, _ := parseFrames(t, bytes.Join(cc.writes, nil))
	if len(got) != 2 || !bytes.Equal(got[0], in[0]) || string(got[1]) != "small" {
		t.Fatal("a 64-bit length frame did not round-trip")
	}
}

func TestWriteDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := New(a, 20*time.Millisecond)
	if _, err := c.Write([]byte("nobody reads this")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a peer that does not read: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := c.WriteText([][]byte{[]byte("nor this")}, false); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WriteText to a peer that does not read: %v, want os.ErrDeadlineExceeded", err)
	}
}
