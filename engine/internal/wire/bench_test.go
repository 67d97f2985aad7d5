package wire

import (
	"encoding/json"
	"testing"
)

var benchData = json.RawMessage(`{"sandbox_id":"0d6f8c1e-3a1b-4c55-9a4e-0d2f7a1b9c10","cmd":"echo","args":["hello"]}`)

func benchInvoke() *Message {
	ns := "default"
	return &Message{Type: TypeInvokeFunction, InvocationID: "5f2b9c1e04a7-1k2j", FunctionID: "bench::echo", Data: benchData, Namespace: &ns, TimeoutMS: 30000}
}

// BenchmarkEncode: one invokefunction frame with the ~90-byte bench payload, into a reused
// buffer as the connection writers do.
func BenchmarkEncode(b *testing.B) {
	m := benchInvoke()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEncode(buf[:0], m)
	}
	b.SetBytes(int64(len(buf)))
}

// benchDecode decodes frame with decode and recycles the Message, as the forward path does.
func benchDecode(b *testing.B, frame []byte, decode func([]byte) (*Message, error)) {
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := decode(frame)
		if err != nil {
			b.Fatal(err)
		}
		Recycle(m)
	}
}

// BenchmarkDecode: the invokefunction frame of BenchmarkEncode, parsed.
func BenchmarkDecode(b *testing.B) {
	frame, _ := Encode(benchInvoke())
	benchDecode(b, frame, Decode)
}

// BenchmarkDecodeBorrowed: the same frame decoded as the engine's worker connections do, its
// payload left in the input (DecodeBorrowed).
func BenchmarkDecodeBorrowed(b *testing.B) {
	frame, _ := Encode(benchInvoke())
	benchDecode(b, frame, DecodeBorrowed)
}

// BenchmarkDecodeResult: an invocationresult frame, the other half of a round trip.
func BenchmarkDecodeResult(b *testing.B) {
	frame, _ := Encode(&Message{Type: TypeInvocationResult, InvocationID: "5f2b9c1e04a7-1k2j", FunctionID: "bench::echo", Result: benchData})
	benchDecode(b, frame, Decode)
}

// BenchmarkValid: wire.Valid against encoding/json's on the bench payload.
func BenchmarkValid(b *testing.B) {
	b.Run("wire", func(b *testing.B) {
		for b.Loop() {
			if !Valid(benchData) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if !json.Valid(benchData) {
				b.Fatal("invalid")
			}
		}
	})
}
