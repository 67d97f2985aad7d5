package proto

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// pair wires two ends of connection 7 so that each one's frames are delivered to the other.
func pair() (a, b *ConnEnd) {
	a = NewConnEnd(7, func(f Frame) error { b.Deliver(f); return nil })
	b = NewConnEnd(7, func(f Frame) error { a.Deliver(f); return nil })
	return a, b
}

// TestConnEndRelaysUnderCredit: more than a window moves in small and large writes, the
// reader's credit reopening the writer's window; the complete End reads as io.EOF after the
// last byte, and the other direction goes on after it (a half-close).
func TestConnEndRelaysUnderCredit(t *testing.T) {
	a, b := pair()
	want := bytes.Repeat([]byte("0123456789abcdef"), 3*StreamWindow/16+5)
	go func() {
		for i := 0; i < 1000; i++ { // many small frames first, then the rest at once
			if _, err := a.Write(want[i : i+1]); err != nil {
				t.Error(err)
			}
		}
		if _, err := a.Write(want[1000:]); err != nil {
			t.Error(err)
		}
		_ = a.CloseWrite()
	}()
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (want %d): %v", len(got), len(want), err)
	}
	if _, err := b.Write([]byte("answer")); err != nil {
		t.Fatalf("write after the peer's half-close: %v", err)
	}
	_ = b.CloseWrite()
	back, err := io.ReadAll(a)
	if err != nil || string(back) != "answer" {
		t.Fatalf("a read %q %v", back, err)
	}
	if !a.Done() || !b.Done() {
		t.Fatal("both ends should be done")
	}
}

// TestConnEndAbortAndWindow: Close drops the connection at the peer (its reads and writes fail
// with the reason); a peer sending past its window breaks the connection instead of growing
// the buffer; a read deadline passes.
func TestConnEndAbortAndWindow(t *testing.T) {
	a, b := pair()
	if _, err := a.Write([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	a.Close("closed by the host")
	buf := make([]byte, 16)
	if n, err := b.Read(buf); n != 4 || err != nil {
		t.Fatalf("bytes before the abort: %d %v", n, err)
	}
	if _, err := b.Read(buf); err == nil || !strings.Contains(err.Error(), "closed by the host") {
		t.Fatalf("read after abort: %v", err)
	}
	if _, err := b.Write([]byte("x")); err == nil {
		t.Fatal("write after the peer's abort succeeded")
	}

	var sent []Frame
	c := NewConnEnd(9, func(f Frame) error { sent = append(sent, f); return nil })
	c.Deliver(Frame{Type: TypeData, ID: 9, Payload: make([]byte, StreamWindow)})
	c.Deliver(Frame{Type: TypeData, ID: 9, Payload: []byte("over")})
	if len(sent) != 1 || sent[0].Type != TypeEnd || len(sent[0].Payload) == 0 {
		t.Fatalf("frames sent on a window overrun: %+v", sent)
	}
	if _, err := c.Read(buf); !errors.Is(err, ErrStreamWindow) {
		t.Fatalf("read after overrun: %v", err)
	}

	d := NewConnEnd(11, func(Frame) error { return nil })
	_ = d.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := d.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
}
