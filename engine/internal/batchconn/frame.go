package batchconn

import (
	"crypto/rand"
	"encoding/binary"
)

// WriteText writes each payload as one final WebSocket text frame (RFC 6455 §5.2), all of them
// with one socket write (or one per MaxHeld bytes). Clients pass mask true: their frames carry
// a random masking key, as the RFC requires of them; servers send unmasked frames. The
// connection has no negotiated extensions, and every frame goes out whole under c.mu, so frames
// never interleave. Control frames that wait go out before each socket write; once a close frame
// is queued, WriteText sends no more data and fails with ErrCloseSent.
func (c *Conn) WriteText(payloads [][]byte, mask bool) error {
	var keys []byte
	if mask {
		keys = make([]byte, 4*len(payloads))
		_, _ = rand.Read(keys) // never fails (crypto/rand)
	}
	c.mu.Lock()
	err := c.writeTextLocked(payloads, keys)
	c.mu.Unlock()
	c.kickControl()
	return err
}

func (c *Conn) writeTextLocked(payloads [][]byte, keys []byte) error {
	for i, p := range payloads {
		var key []byte
		if keys != nil {
			key = keys[4*i : 4*i+4]
		}
		c.buf = appendFrameOp(c.buf, 0x80|OpText, p, key)
		if len(c.buf) >= MaxHeld {
			if err := c.flushLocked(); err != nil {
				return err
			}
		}
	}
	return c.flushLocked()
}

// newMaskKey is a random masking key.
func newMaskKey() []byte {
	key := make([]byte, 4)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return key
}

// appendFrameOp appends a frame whose first byte is first (FIN and opcode) carrying p, masked
// with key when key is set.
func appendFrameOp(b []byte, first byte, p, key []byte) []byte {
	var maskBit byte
	if key != nil {
		maskBit = 0x80
	}
	b = append(b, first)
	switch n := len(p); {
	case n < 126:
		b = append(b, maskBit|byte(n))
	case n <= 0xffff:
		b = append(b, maskBit|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, maskBit|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if key == nil {
		return append(b, p...)
	}
	b = append(b, key...)
	start := len(b)
	b = append(b, p...)
	maskBytes(b[start:], key)
	return b
}

// maskBytes XORs b with the 4-byte key repeated, eight bytes at a time where it can.
func maskBytes(b, key []byte) { maskBytesAt(b, key, 0) }

// maskBytesAt is maskBytes for b starting at offset off of the frame's payload.
func maskBytesAt(b, key []byte, off int) {
	if off&3 != 0 {
		var r [4]byte
		for i := range r {
			r[i] = key[(i+off)&3]
		}
		key = r[:]
	}
	k := uint64(binary.LittleEndian.Uint32(key))
	k |= k << 32
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:])^k)
	}
	for ; i < len(b); i++ {
		b[i] ^= key[i&3]
	}
}
