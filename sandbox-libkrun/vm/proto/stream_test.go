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
