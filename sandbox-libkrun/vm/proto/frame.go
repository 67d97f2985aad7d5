// Package proto is the wire format between the host driver and the guest agent: length-prefixed
// frames over the virtio-serial control port, each carrying a type, a request id and a payload
// (JSON for every message type defined here).
package proto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MaxPayload bounds one frame's payload; larger frames are refused on both ends.
const MaxPayload = 64 << 20

// headerLen is the length prefix (4) plus type (1) plus id (4).
const headerLen = 9

// Type says what a frame carries.
type Type byte

// Frame types. Host→guest: Init, Exec, Kill, FS, Shutdown, Proc* requests. Guest→host: Hello,
// Reply, Output, ExecDone, ProcExit. Both ways (streamed fs::read and fs::write, revision 5;
// process attachments, revision 9): Data, End, Credit.
const (
	TypeHello    Type = 1  // guest is up: Hello
	TypeInit     Type = 2  // set up the root filesystem: Init; answered by Reply
	TypeExec     Type = 3  // run a command: Exec; answered by Output* then ExecDone
	TypeKill     Type = 4  // signal a running exec: Kill (same id as the Exec)
	TypeFS       Type = 5  // file operation: FS; answered by Reply
	TypeShutdown Type = 6  // sync and power off; no answer
	TypeReply    Type = 7  // answer to Init or FS: Reply
	TypeOutput   Type = 8  // streamed output chunk of an exec: Output
	TypeExecDone Type = 9  // an exec finished: ExecDone
	TypePing     Type = 10 // liveness probe; answered by a Reply with the same id
	TypeData     Type = 11 // a chunk of a streamed file (raw bytes, not JSON); same id as its FS
	TypeEnd      Type = 12 // end of a stream: empty payload when complete, else why it was aborted
	TypeCredit   Type = 13 // the receiver of a stream took bytes: Credit
	TypeResume   Type = 14 // a machine restored from a snapshot starts anew: Resume; answered by Reply
	TypePrestart Type = 15 // start an interpreter that the next exec of a script forks: Prestart; answered by Reply

	// Long-lived processes (revision 9, process.go). Each host→guest request is answered by a
	// Reply; an attachment's output and input move as streams (Data, End, Credit) on ids the
	// host names in the request.
	TypeProcStart  Type = 16 // start a process: ProcStart; Reply holds its ProcInfo
	TypeProcAttach Type = 17 // attach to a process: ProcAttach; Reply holds ProcAttached
	TypeProcList   Type = 18 // list processes: empty payload; Reply holds ProcListed
	TypeProcSignal Type = 19 // signal a process group: ProcSignal; empty Reply
	TypeProcWait   Type = 20 // wait for a process to exit: ProcRef; Reply holds ProcExit once it did
	TypeProcResize Type = 21 // resize a process's terminal: ProcResize; empty Reply
	TypeProcExit   Type = 22 // guest→host, on an attachment's stdout id: ProcExit, after the last output and before the End frames

	// Connections to the guest's loopback (revision 10, conn.go): the host asks the agent to
	// dial a TCP port on the guest's 127.0.0.1; the frame's id is then the connection's, its
	// bytes moving both ways as Data, End and Credit on it.
	TypeDial Type = 23 // dial a guest port: Dial; Reply once connected (or why not)
)

// Frame is one message on the control channel.
type Frame struct {
	Type    Type
	ID      uint32
	Payload []byte
}

// ErrTooLarge is returned for a frame whose payload exceeds MaxPayload.
var ErrTooLarge = errors.New("proto: frame payload too large")

// Encode appends the wire form of f to dst.
func Encode(dst []byte, f Frame) ([]byte, error) {
	if len(f.Payload) > MaxPayload {
		return dst, ErrTooLarge
	}
	h := header(f)
	dst = append(dst, h[:]...)
	return append(dst, f.Payload...), nil
}

// header is f's frame header: its length (type, id and payload), type and id.
func header(f Frame) [headerLen]byte {
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(f.Payload)+5))
	h[4] = byte(f.Type)
	binary.BigEndian.PutUint32(h[5:9], f.ID)
	return h
}

// Write writes f to w: a small frame in a single Write call, a large one (a stream's Data) as
// its header then its payload, which saves copying the payload. Concurrent writers must hold a
// mutex around Write.
func Write(w io.Writer, f Frame) error {
	if len(f.Payload) < splitWrite {
		b, err := Encode(make([]byte, 0, headerLen+len(f.Payload)), f)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	if len(f.Payload) > MaxPayload {
		return ErrTooLarge
	}
	h := header(f)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(f.Payload)
	return err
}

// splitWrite is the payload size from which Write sends header and payload apart.
const splitWrite = 32 << 10

// Read reads one frame from r. A clean end of stream before a frame starts is io.EOF; a stream
// that ends inside a frame is io.ErrUnexpectedEOF.
func Read(r *bufio.Reader) (Frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:4]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:4])
	if n < 5 {
		return Frame{}, fmt.Errorf("proto: frame length %d shorter than its header", n)
	}
	if n-5 > MaxPayload {
		return Frame{}, ErrTooLarge
	}
	if _, err := io.ReadFull(r, h[4:]); err != nil {
		return Frame{}, unexpected(err)
	}
	f := Frame{Type: Type(h[4]), ID: binary.BigEndian.Uint32(h[5:9])}
	if n > 5 {
		p, err := readPayload(r, int(n-5))
		if err != nil {
			return Frame{}, unexpected(err)
		}
		f.Payload = p
	}
	return f, nil
}

// ReadBuffer is the size of the bufio.Reader to Read frames from: smaller than a stream chunk,
// so that the bulk of a Data frame is read straight into its payload rather than copied
// through the buffer (a copy that costs under emulation).
const ReadBuffer = 64 << 10

// firstAlloc bounds what a frame's declared length makes Read allocate before its bytes arrive:
// a stream's Data frame fits.
const firstAlloc = StreamChunk

// readPayload reads exactly n bytes, growing the buffer as they arrive: a peer that declares a
// large frame and sends less makes the reader hold only what it sent (the guest is untrusted).
func readPayload(r io.Reader, n int) ([]byte, error) {
	var buf []byte
	if n == StreamChunk {
		buf = (*chunkPool.Get().(*[]byte))[:0]
	} else {
		buf = make([]byte, 0, min(n, firstAlloc))
	}
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		end := min(cap(buf), n)
		m, err := r.Read(buf[len(buf):end])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// chunkPool recycles the payloads of full stream chunks, so that a stream does not make the
// runtime clear a fresh chunk for every frame (costly under emulation).
var chunkPool = sync.Pool{New: func() any { b := make([]byte, StreamChunk); return &b }}

// Release gives back the payload of a frame Read returned once it is no longer used; payloads
// of any other size are left to the garbage collector.
func Release(p []byte) {
	if cap(p) == StreamChunk {
		p = p[:StreamChunk]
		chunkPool.Put(&p)
	}
}
