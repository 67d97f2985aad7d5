//go:build linux

package main

import (
	"bytes"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// seq is n bytes counting from offset from, so any byte says where it belongs.
func seq(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((from + i) % 251)
	}
	return b
}

func readAll(r *outRing, from int64) []byte {
	b := make([]byte, r.end-from)
	return b[:r.read(from, b)]
}

func TestRingKeepsTheLastBytes(t *testing.T) {
	r := newOutRing(minRing)
	total := 0
	for _, n := range []int{100, 5000, r.size - 1, 3, 2 * r.size, 77} {
		r.write(seq(total, n))
		total += n
		if r.end != int64(total) {
			t.Fatalf("end %d after %d bytes", r.end, total)
		}
		from := r.start()
		if want := seq(int(from), total-int(from)); !bytes.Equal(readAll(r, from), want) {
			t.Fatalf("after %d bytes the ring from %d holds other bytes", total, from)
		}
		if total-int(from) != min(total, r.size) {
			t.Fatalf("after %d bytes the ring holds %d, want %d", total, total-int(from), min(total, r.size))
		}
	}
}

func TestRingReplaysFromTheLastCreditedByte(t *testing.T) {
	r := newOutRing(1 << 20)
	r.write(seq(0, 1000))
	if d := r.attach(); d != 0 {
		t.Fatalf("dropped %d on the first attachment", d)
	}
	// The attachment sends 1000 bytes; the host takes 600 of them, then goes away.
	if n := r.sendable(); n != 1000 {
		t.Fatalf("sendable %d, want 1000", n)
	}
	r.sentFrame(1000)
	if err := r.credit(600); err != nil {
		t.Fatal(err)
	}
	if err := r.credit(401); err == nil {
		t.Fatal("a credit beyond what was sent was taken")
	}
	r.write(seq(1000, 500))
	if d := r.attach(); d != 0 || r.sent != 600 {
		t.Fatalf("re-attach: dropped %d, from %d; want 0 from 600", d, r.sent)
	}
	if got := readAll(r, r.sent); !bytes.Equal(got, seq(600, 900)) {
		t.Fatalf("replay holds other bytes than 600..1500")
	}
}

func TestRingCountsWhatOverflowed(t *testing.T) {
	r := newOutRing(minRing)
	r.attach()
	r.write(seq(0, 100))
	r.sentFrame(100)
	_ = r.credit(100)
	// Detached, the process writes far more than the ring keeps.
	r.write(seq(100, 10*r.size))
	end := r.end
	d := r.attach()
	if want := end - 100 - int64(r.keep); d != want {
		t.Fatalf("dropped %d, want %d", d, want)
	}
	if r.sent != end-int64(r.keep) || !bytes.Equal(readAll(r, r.sent), seq(int(r.sent), r.keep)) {
		t.Fatalf("replay does not start at the ring's kept bytes")
	}
	// The loss is counted once: attaching again without reading loses nothing more.
	if d := r.attach(); d != 0 {
		t.Fatalf("second attach dropped %d", d)
	}
}

func TestRingBackPressure(t *testing.T) {
	r := newOutRing(64 << 20)
	r.attach()
	for r.mayRead(true) {
		r.write(make([]byte, pumpBuf))
	}
	if r.end < int64(proto.StreamWindow) || r.end > int64(proto.StreamWindow)+pumpBuf {
		t.Fatalf("reads stopped at %d bytes, want about a window (%d)", r.end, proto.StreamWindow)
	}
	if !r.mayRead(false) {
		t.Fatal("a detached process's pipe is not read")
	}
	for r.sendable() > 0 {
		r.sentFrame(r.sendable())
	}
	if r.sent != int64(proto.StreamWindow) {
		t.Fatalf("sent %d before credit, want a window", r.sent)
	}
	_ = r.credit(proto.StreamChunk)
	if !r.mayRead(true) {
		t.Fatal("a credit did not reopen the reads")
	}
	r.write(make([]byte, pumpBuf))
	if r.sendable() != pumpBuf {
		t.Fatalf("sendable %d after a read under the new credit, want %d", r.sendable(), pumpBuf)
	}
	// A ring smaller than a window bounds the bytes not yet sent, so none is overwritten while
	// attached; sent ones may run a window ahead of the host, and a re-attachment counts those
	// the ring no longer holds as dropped.
	s := newOutRing(minRing)
	s.attach()
	for s.mayRead(true) {
		s.write(seq(int(s.end), pumpBuf))
		if s.end-s.sent > int64(s.size) {
			t.Fatalf("%d bytes not sent exceed the ring (%d)", s.end-s.sent, s.size)
		}
		for s.sendable() > 0 {
			s.sentFrame(s.sendable())
		}
	}
	if s.end-s.credited < int64(proto.StreamWindow) {
		t.Fatalf("reads stopped at %d bytes not credited, want a window", s.end-s.credited)
	}
	_ = s.credit(s.inflight[0])
	taken := s.credited
	if d := s.attach(); d != s.end-int64(s.keep)-taken || !bytes.Equal(readAll(s, s.sent), seq(int(s.sent), s.keep)) {
		t.Fatalf("re-attach dropped %d, want %d", d, s.end-int64(s.keep)-taken)
	}
}

// TestRingCoalescesSmallWrites: a small frame goes out at once when none is in flight; the
// next small writes wait for its credit (or for enough bytes to fill a frame) and go together.
func TestRingCoalescesSmallWrites(t *testing.T) {
	r := newOutRing(1 << 20)
	r.attach()
	r.write([]byte("line\n"))
	if n := r.sendable(); n != 5 {
		t.Fatalf("sendable %d with nothing in flight, want 5", n)
	}
	r.sentFrame(5)
	for range 10 {
		r.write([]byte("line\n"))
	}
	if n := r.sendable(); n != 0 {
		t.Fatalf("sendable %d while a small frame is in flight, want 0", n)
	}
	_ = r.credit(5)
	if n := r.sendable(); n != 50 {
		t.Fatalf("sendable %d after the credit, want the 50 bytes written since", n)
	}
	r.sentFrame(50)
	r.write(make([]byte, smallFrame))
	if n := r.sendable(); n != smallFrame {
		t.Fatalf("sendable %d with a full frame's worth waiting, want %d", n, smallFrame)
	}
	for r.sendable() > 0 {
		r.sentFrame(r.sendable())
		r.write(make([]byte, smallFrame))
	}
	if len(r.inflight) != maxInflight || maxInflight+4 != proto.StreamQueue {
		t.Fatalf("%d frames in flight, want at most %d", len(r.inflight), maxInflight)
	}
	r.eof = true
	_ = r.credit(50)
	if r.sendable() == 0 {
		t.Fatal("the last bytes of an ended stream wait")
	}
}

// TestRingSettle: once the pipe ended and the host took everything, the buffer is freed and a
// later attachment replays nothing and loses nothing.
func TestRingSettle(t *testing.T) {
	r := newOutRing(minRing)
	r.attach()
	r.write(seq(0, 100))
	r.eof = true
	r.sentFrame(r.sendable())
	r.settle()
	if r.buf == nil {
		t.Fatal("freed before the host took the bytes")
	}
	_ = r.credit(100)
	r.settle()
	if r.buf != nil {
		t.Fatal("kept after the host took every byte")
	}
	if d := r.attach(); d != 0 || r.sendable() != 0 || !r.done() {
		t.Fatalf("re-attach after settling: dropped %d, sendable %d", d, r.sendable())
	}
}
