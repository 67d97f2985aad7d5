package proto

import (
	"io"
	"slices"
	"testing"
)

func TestCreditAndEnd(t *testing.T) {
	f := CreditFrame(9, StreamChunk)
	if n, err := ParseCredit(f.Payload); err != nil || n != StreamChunk || f.Type != TypeCredit || f.ID != 9 {
		t.Fatalf("credit %+v: %d %v", f, n, err)
	}
	if _, err := ParseCredit([]byte{1, 2}); err == nil {
		t.Fatal("a short credit payload parsed")
	}
	if _, err := ParseCredit(CreditFrame(1, StreamWindow+1).Payload); err == nil {
		t.Fatal("a credit beyond the window parsed")
	}
	if e := EndFrame(3, ""); e.Type != TypeEnd || len(e.Payload) != 0 {
		t.Fatalf("end %+v", e)
	}
	if e := EndFrame(3, "gone"); string(e.Payload) != "gone" {
		t.Fatalf("abort %+v", e)
	}
}

func TestWindow(t *testing.T) {
	w := NewWindow()
	if !w.TryTake(StreamWindow) || w.TryTake(1) {
		t.Fatal("a new window holds exactly StreamWindow bytes")
	}
	if got := w.Grant(StreamChunk); got != StreamChunk {
		t.Fatalf("Grant returned %d, want %d", got, StreamChunk)
	}
	select {
	case <-w.More():
	default:
		t.Fatal("Grant did not signal More")
	}
	if !w.TryTake(StreamChunk) || w.TryTake(1) {
		t.Fatal("the granted bytes can be taken once")
	}
	w.Grant(StreamWindow)
	if got := w.Grant(1); got <= StreamWindow {
		t.Fatalf("an over-grant is reported: got %d", got)
	}
}

// TestReceiver: bytes read in pieces, credit granted for a Data frame only once it is taken
// (before the next frame is read), and an End that completes or aborts the stream.
func TestReceiver(t *testing.T) {
	for _, c := range []struct {
		end     string
		wantErr string
	}{{"", ""}, {"disk full", "the sender aborted: disk full"}} {
		frames := []Frame{{Type: TypeData, Payload: []byte("hello")}, {Type: TypeData, Payload: []byte(" world")}, EndFrame(1, c.end)}
		var granted []int
		r := &Receiver{
			Next: func() (Frame, error) {
				f := frames[0]
				frames = frames[1:]
				return f, nil
			},
			Grant:       func(n int) error { granted = append(granted, n); return nil },
			AbortPrefix: "the sender aborted: ",
		}
		p := make([]byte, 3)
		n, err := r.Read(p)
		if n != 3 || err != nil || string(p) != "hel" || len(granted) != 0 {
			t.Fatalf("first read: %q %v, granted %v", p[:n], err, granted)
		}
		b, err := r.Chunk()
		if string(b) != "lo" || err != nil {
			t.Fatalf("chunk: %q %v", b, err)
		}
		b, err = r.Chunk()
		if string(b) != " world" || err != nil || !slices.Equal(granted, []int{5}) {
			t.Fatalf("second chunk: %q %v, granted %v", b, err, granted)
		}
		_, err = r.Read(p)
		if !slices.Equal(granted, []int{5, 6}) {
			t.Fatalf("granted %v, want [5 6]", granted)
		}
		if c.wantErr == "" && err != io.EOF || c.wantErr != "" && (err == nil || err.Error() != c.wantErr) {
			t.Fatalf("end %q: got %v, want %q", c.end, err, c.wantErr)
		}
		if _, err2 := r.Read(p); err2 != err {
			t.Fatalf("a read after the end: %v, want %v again", err2, err)
		}
	}
}

// TestStreamDeliver: frames are queued in order and credit is granted; a malformed Credit,
// credit past the window, an oversized Data frame or a full queue stops the stream, and Take
// then fails even with credit left.
func TestStreamDeliver(t *testing.T) {
	s := NewStream()
	s.Deliver(Frame{Type: TypeData, ID: 1, Payload: []byte("a")})
	s.Deliver(EndFrame(1, ""))
	if f := <-s.Frames; string(f.Payload) != "a" {
		t.Fatalf("first frame %v", f)
	}
	if f := <-s.Frames; f.Type != TypeEnd {
		t.Fatalf("second frame %v", f)
	}
	if !s.Take(StreamWindow) {
		t.Fatal("a full window was not taken")
	}
	s.Deliver(CreditFrame(1, StreamChunk))
	if !s.Take(StreamChunk) {
		t.Fatal("granted credit was not taken")
	}
	for name, breaks := range map[string]func(*Stream){
		"malformed credit": func(s *Stream) { s.Deliver(Frame{Type: TypeCredit, Payload: []byte{1}}) },
		"over-grant":       func(s *Stream) { s.Deliver(CreditFrame(1, 1)) },
		"oversized data":   func(s *Stream) { s.Deliver(Frame{Type: TypeData, Payload: make([]byte, StreamChunk+1)}) },
		"full queue": func(s *Stream) {
			for range StreamQueue + 1 {
				s.Deliver(Frame{Type: TypeData})
			}
		},
	} {
		s := NewStream()
		breaks(s)
		select {
		case <-s.Stopped():
		default:
			t.Errorf("%s: the stream did not stop", name)
		}
		if s.Take(1) {
			t.Errorf("%s: Take succeeded on a stopped stream", name)
		}
	}
}

// TestReceiverSettle: Settle grants a frame's credit once its last byte was read, not before,
// and the next read grants nothing more for it.
func TestReceiverSettle(t *testing.T) {
	frames := []Frame{{Type: TypeData, Payload: []byte("hello")}, EndFrame(1, "")}
	var granted []int
	r := &Receiver{
		Next:  func() (Frame, error) { f := frames[0]; frames = frames[1:]; return f, nil },
		Grant: func(n int) error { granted = append(granted, n); return nil },
	}
	p := make([]byte, 3)
	if n, _ := r.Read(p); n != 3 || r.Settle() != nil || len(granted) != 0 {
		t.Fatalf("after 3 of 5 bytes: granted %v", granted)
	}
	if n, _ := r.Read(p); n != 2 || r.Settle() != nil || !slices.Equal(granted, []int{5}) {
		t.Fatalf("after 5 of 5 bytes: granted %v, want [5]", granted)
	}
	if _, err := r.Read(p); err != io.EOF || !slices.Equal(granted, []int{5}) {
		t.Fatalf("at the end: %v, granted %v", err, granted)
	}
}
