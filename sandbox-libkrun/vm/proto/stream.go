package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Streams (revision 5). A streamed fs op moves its file as Data frames of at most StreamChunk
// bytes, ended by an End frame. The sender keeps at most StreamWindow bytes in flight: it starts
// with that much credit, spends a Data frame's length on sending it, and regains bytes when the
// receiver sends Credit for what it took. So each side holds at most one window of a file in
// memory, whatever the file's size, and a slow consumer never blocks the control port (the
// exec output and the other fs ops that share it). Either side may end a stream early with an
// End whose payload says why; the other side then stops and drops what is still in flight.
const (
	StreamChunk  = 256 << 10
	StreamWindow = 16 * StreamChunk
)

// CreditFrame is the Credit for n bytes taken from stream id.
func CreditFrame(id uint32, n int) Frame {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return Frame{Type: TypeCredit, ID: id, Payload: b[:]}
}

// ParseCredit returns the byte count of a Credit frame's payload.
func ParseCredit(p []byte) (int, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("proto: credit payload of %d bytes, want 4", len(p))
	}
	n := binary.BigEndian.Uint32(p)
	if n > StreamWindow {
		return 0, fmt.Errorf("proto: credit of %d bytes exceeds the window", n)
	}
	return int(n), nil
}

// EndFrame ends stream id: complete when reason is empty, else aborted for reason.
func EndFrame(id uint32, reason string) Frame {
	return Frame{Type: TypeEnd, ID: id, Payload: []byte(reason)}
}

// ErrStreamWindow is a sender that sent more than its credit allowed.
var ErrStreamWindow = errors.New("proto: stream peer sent beyond its window")
