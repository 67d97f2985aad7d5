package batchconn

import (
	"bytes"
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

func TestHoldGathersWritesIntoOne(t *testing.T) {
	cc := &countConn{}
	c := New(cc, time.Second)
	c.Hold()
	for _, s := range []string{"a", "bc", "def"} {
		if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if len(cc.writes) != 0 {
		t.Fatalf("held writes reached the socket: %q", cc.writes)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(cc.writes) != 1 || string(cc.writes[0]) != "abcdef" {
		t.Fatalf("socket writes %q, want one of \"abcdef\"", cc.writes)
	}
	if _, err := c.Write([]byte("g")); err != nil || len(cc.writes) != 2 {
		t.Fatalf("a write after Flush is not sent at once: %q, %v", cc.writes, err)
	}
}

func TestHeldBufferIsBounded(t *testing.T) {
	cc := &countConn{}
	c := New(cc, 0)
	c.Hold()
	chunk := bytes.Repeat([]byte("x"), 1000)
	for range MaxHeld/1000 + 1 {
		if _, err := c.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if len(cc.writes) != 1 || len(cc.writes[0]) < MaxHeld {
		t.Fatalf("a held buffer past MaxHeld was not written: %d writes", len(cc.writes))
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(cc.writes) != 1 {
		t.Fatalf("Flush of an empty buffer wrote %d times", len(cc.writes)-1)
	}
}

func TestWriteDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := New(a, 20*time.Millisecond)
	_, err := c.Write([]byte("nobody reads this"))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a peer that does not read: %v, want os.ErrDeadlineExceeded", err)
	}
	c.Hold()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatalf("a held write touched the socket: %v", err)
	}
	if err := c.Flush(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Flush to a peer that does not read: %v, want os.ErrDeadlineExceeded", err)
	}
}
