package proto

import "testing"

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
