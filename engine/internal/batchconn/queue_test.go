package batchconn

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestQueueCoalesces: the frames queued while the writer was away leave with one socket
// write, in order, and their buffers come back through Buf.
func TestQueueCoalesces(t *testing.T) {
	cc := &countConn{}
	q := NewQueue(New(cc, time.Second), true, 0, 0)
	var want [][]byte
	for i := range 10 {
		b := append(q.Buf(), "frame "+strconv.Itoa(i)...)
		want = append(want, b)
		if err := q.Push(b); err != nil {
			t.Fatal(err)
		}
	}
	ran := make(chan error, 1)
	go func() { ran <- q.Run() }()
	q.Drain()
	if len(cc.writes) != 1 {
		t.Fatalf("%d socket writes, want 1", len(cc.writes))
	}
	got, masked := parseFrames(t, cc.writes[0])
	if len(got) != 10 || !masked[0] {
		t.Fatalf("%d frames (masked %v), want 10 masked", len(got), masked)
	}
	for i := range got {
		if string(got[i]) != "frame "+strconv.Itoa(i) {
			t.Fatalf("frame %d is %q", i, got[i])
		}
	}
	if b := q.Buf(); b == nil || len(b) != 0 {
		t.Fatalf("Buf after a write: %q (cap %d), want an empty recycled buffer", b, cap(b))
	}
	q.Stop(errors.New("done"))
	if err := <-ran; err != nil {
		t.Fatalf("Run after Stop: %v", err)
	}
	if err := q.Push([]byte("late")); err == nil || err.Error() != "done" {
		t.Fatalf("Push after Stop: %v", err)
	}
}

// TestQueueFull: a frame that would take a non-empty queue past its limits is refused with
// FullError and stops the queue; a large frame into an empty queue is taken.
func TestQueueFull(t *testing.T) {
	q := NewQueue(New(&countConn{}, time.Second), false, 100, 2)
	if err := q.Push(bytes.Repeat([]byte("x"), 500)); err != nil {
		t.Fatalf("a frame into an empty queue: %v", err)
	}
	var full *FullError
	if err := q.Push([]byte("y")); !errors.As(err, &full) || full.Frames != 1 || full.Bytes != 500 {
		t.Fatalf("over the byte limit: %v", err)
	}
	if err := q.Push([]byte("z")); !errors.As(err, &full) {
		t.Fatalf("after a FullError: %v, want the queue stopped with it", err)
	}

	q = NewQueue(New(&countConn{}, time.Second), false, 100, 2)
	for range 2 {
		if err := q.Push([]byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Push([]byte("b")); !errors.As(err, &full) || full.Frames != 2 {
		t.Fatalf("over the frame limit: %v", err)
	}
}

// TestQueueStopAfter: StopAfter's function runs once the frames queued before it are written,
// and nothing is queued after it.
func TestQueueStopAfter(t *testing.T) {
	cc := &countConn{}
	q := NewQueue(New(cc, time.Second), false, 0, 0)
	_ = q.Push([]byte("one"))
	_ = q.Push([]byte("two"))
	ran := false
	q.StopAfter(func() { ran = len(cc.writes) == 1 })
	if err := q.Push([]byte("three")); !errors.Is(err, ErrStopping) {
		t.Fatalf("Push after StopAfter: %v", err)
	}
	if err := q.Run(); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("the function did not run after the queued frames were written")
	}
	if got, _ := parseFrames(t, cc.writes[0]); len(got) != 2 {
		t.Fatalf("%d frames written, want 2", len(got))
	}
}

// TestQueueWriteError: a peer that does not read fails Run with a WriteError carrying the
// deadline error, and later Pushes get it.
func TestQueueWriteError(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	q := NewQueue(New(a, 20*time.Millisecond), false, 0, 0)
	_ = q.Push([]byte("nobody reads this"))
	_ = q.Push([]byte("nor this"))
	err := q.Run()
	var werr *WriteError
	if !errors.As(err, &werr) || !errors.Is(err, os.ErrDeadlineExceeded) || werr.Bytes != len("nobody reads this")+len("nor this") {
		t.Fatalf("Run: %v, want a WriteError with os.ErrDeadlineExceeded", err)
	}
	if err := q.Push([]byte("x")); !errors.As(err, &werr) {
		t.Fatalf("Push after the failure: %v", err)
	}
	q.Drain() // returns: the queue is stopped
}
