package proto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	frames := []Frame{
		{Type: TypeHello, ID: 0, Payload: []byte(`{"kernel_release":"6.1"}`)},
		{Type: TypeExec, ID: 7, Payload: nil},
		{Type: TypeOutput, ID: 1<<32 - 1, Payload: bytes.Repeat([]byte{0xff}, 100000)},
	}
	var buf bytes.Buffer
	for _, f := range frames {
		if err := Write(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for i, want := range frames {
		got, err := Read(r)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.Type != want.Type || got.ID != want.ID || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("frame %d: got %v/%d/%d bytes, want %v/%d/%d bytes", i, got.Type, got.ID, len(got.Payload), want.Type, want.ID, len(want.Payload))
		}
	}
	if _, err := Read(r); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
}

func TestTruncated(t *testing.T) {
	b, _ := Encode(nil, Frame{Type: TypeFS, ID: 3, Payload: []byte("hello")})
	for n := 1; n < len(b); n++ {
		_, err := Read(bufio.NewReader(bytes.NewReader(b[:n])))
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

func TestLimits(t *testing.T) {
	if _, err := Encode(nil, Frame{Payload: make([]byte, MaxPayload+1)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("encode oversize: %v", err)
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0}
	if _, err := Read(bufio.NewReader(bytes.NewReader(huge))); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("read oversize: %v", err)
	}
	short := []byte{0, 0, 0, 4, 1, 0, 0, 0}
	if _, err := Read(bufio.NewReader(bytes.NewReader(short))); err == nil {
		t.Fatal("read of a length below the header size succeeded")
	}
}

// A header that declares the largest payload, followed by a few bytes and the end: Read holds
// what arrived, not the declared size (the guest is untrusted).
func TestDeclaredLengthIsNotAllocated(t *testing.T) {
	var hdr [headerLen]byte
	binary.BigEndian.PutUint32(hdr[:4], MaxPayload+5)
	hdr[4] = byte(TypeOutput)
	data := append(hdr[:], []byte("only this")...)
	r := bufio.NewReader(bytes.NewReader(data))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	_, err := Read(r)
	runtime.ReadMemStats(&ms)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if got := ms.TotalAlloc - before; got > 1<<20 {
		t.Fatalf("a %d-byte frame that sent 9 bytes made Read allocate %d bytes", MaxPayload, got)
	}
}

func FuzzRead(f *testing.F) {
	seed, _ := Encode(nil, Frame{Type: TypeExec, ID: 9, Payload: []byte(`{"argv":["true"]}`)})
	f.Add(seed)
	f.Add([]byte{0, 0, 0, 5, 1, 0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			fr, err := Read(r)
			if err != nil {
				return
			}
			b, err := Encode(nil, fr)
			if err != nil {
				t.Fatalf("re-encode of a decoded frame failed: %v", err)
			}
			back, err := Read(bufio.NewReader(bytes.NewReader(b)))
			if err != nil || back.Type != fr.Type || back.ID != fr.ID || !bytes.Equal(back.Payload, fr.Payload) {
				t.Fatalf("round trip changed the frame: %v", err)
			}
		}
	})
}
