package batchconn

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"
)

// pipeConn is a net.Conn reading data and dropping what is written.
type pipeConn struct {
	net.Conn
	r    *bytes.Reader
	read int // bytes read so far
}

func (p *pipeConn) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.read += n
	return n, err
}
func (p *pipeConn) Write(b []byte) (int, error)      { return len(b), nil }
func (p *pipeConn) Close() error                     { return nil }
func (p *pipeConn) SetWriteDeadline(time.Time) error { return nil }
func (p *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (p *pipeConn) SetDeadline(time.Time) error      { return nil }

// FuzzReadMessage reads up to 64 messages from arbitrary bytes, holding memory as the engine
// does (the buffer a message fits in stays held, up to 64 KiB), and checks that ReadMessage
// never panics, never asks hold for a negative amount, never returns a message past the read
// limit, never uses memory it was not granted, takes budget only for bytes that arrived, and
// that all of it comes back at the end.
func FuzzReadMessage(f *testing.F) {
	masked := func(first byte, p string) []byte { return frame(first, p, true) }
	f.Add(masked(0x81, "hello"), false, uint16(100))
	f.Add(bytes.Join([][]byte{masked(0x01, "a"), masked(0x89, ""), masked(0x80, "b")}, nil), false, uint16(0))
	f.Add(masked(0x88, "\x03\xe8bye"), false, uint16(10))
	f.Add(frame(0x81, "hello", false), true, uint16(10))
	f.Add([]byte{0x81, 0xff, 0, 0, 0, 0, 4, 0, 0, 0, 1, 2, 3, 4, 'x'}, false, uint16(0)) // declares 64 MiB, sends 1 byte
	f.Add(bytes.Join([][]byte{masked(0x01, "\xce"), masked(0x80, "\xba")}, nil), false, uint16(100))
	f.Add(masked(0x81, "{\xff\xfe}"), false, uint16(100))
	f.Add(masked(0x88, "\x03\xed"), false, uint16(100))
	f.Add(bytes.Join([][]byte{masked(0x01, string(make([]byte, minBuf+4))), masked(0x80, "z"), masked(0x81, "next")}, nil), false, uint16(65535))
	f.Fuzz(func(t *testing.T, data []byte, client bool, limit uint16) {
		pc := &pipeConn{r: bytes.NewReader(data)}
		c := New(pc, 0)
		c.client = client
		c.br = bufio.NewReaderSize(pc, readBufSize)
		c.SetReadLimit(int64(limit) + 1)
		const budget = 6000 // a message past minBuf bytes is refused now and then
		free := int64(budget)
		var buf []byte
		held := int64(0) // what buf's capacity holds
		for range 64 {
			before, granted := pc.read, int64(0)
			op, msg, err := c.ReadMessage(buf, func(n int) bool {
				if n < 0 {
					t.Fatalf("negative hold %d", n)
				}
				if int64(n) > free {
					return false
				}
				free -= int64(n)
				granted += int64(n)
				return true
			})
			if arrived := int64(pc.read - before); granted > max(minBuf, 2*arrived) {
				t.Fatalf("%d bytes granted for %d that arrived", granted, arrived)
			}
			held += granted
			if err != nil {
				break
			}
			if int64(len(msg)) > int64(limit)+1 {
				t.Fatalf("message of %d bytes past the limit %d", len(msg), int64(limit)+1)
			}
			if int64(cap(msg)) > held {
				t.Fatalf("a message buffer of %d bytes, %d held", cap(msg), held)
			}
			if op != OpText && op != OpBinary {
				t.Fatalf("opcode %d returned", op)
			}
			buf = nil
			if cap(msg) <= 64<<10 {
				buf = msg[:0]
			}
			free += held - int64(cap(buf)) // keep what the reused buffer holds
			held = int64(cap(buf))
		}
		if free += held; free != budget {
			t.Fatalf("%d bytes of the budget came back, want %d", free, budget)
		}
	})
}
