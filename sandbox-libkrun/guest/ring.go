//go:build linux

package main

import (
	"errors"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// outRing is one output stream of a long-lived process (process.go): the last bytes it wrote,
// and where the host's attachments are in them. Offsets count the stream's bytes from its
// first. It holds no lock; its process's mutex guards it.
//
// The ring keeps keep bytes (the process's RingBytes) for a later attachment plus readSlack,
// the room of one pipe read: a read already under way when an attachment starts cannot then
// overwrite a byte the attachment was promised.
type outRing struct {
	buf  []byte // the byte at offset o is at o % size; grows to size with what is written
	keep int
	size int // keep + readSlack

	end      int64 // offset after the last byte written
	credited int64 // offset after the last byte the host credited (took)
	sent     int64 // offset after the last byte the current attachment sent
	eof      bool  // the pipe reached its end
	inflight []int // the sizes of the frames sent and not yet credited, oldest first
}

// maxInflight bounds the frames an attachment has in flight: the host queues at most
// proto.StreamQueue frames of a stream, and the exit notice and the End come after the last.
const maxInflight = proto.StreamQueue - 4

// readSlack is the most one pipe read takes (pumpBuf): the ring's room beyond keep.
const readSlack = pumpBuf

// pumpBuf is the buffer a process's pipe is read into: a whole frame, so that a process that
// writes faster than the host reads fills frames (each costs a credit from the host).
const pumpBuf = proto.StreamChunk

// minRing is the smallest ring a process gets, whatever it asked for.
const minRing = 4 << 10

func newOutRing(keep int) *outRing {
	keep = max(keep, minRing)
	return &outRing{keep: keep, size: keep + readSlack}
}

// start is the offset of the oldest byte the ring holds.
func (r *outRing) start() int64 { return max(0, r.end-int64(r.size)) }

// write appends p, overwriting the oldest bytes once the ring is full.
func (r *outRing) write(p []byte) {
	if len(p) > r.size {
		r.end += int64(len(p) - r.size)
		p = p[len(p)-r.size:]
	}
	for len(p) > 0 {
		n := copy(r.space(len(p)), p)
		r.commit(n)
		p = p[n:]
	}
}

// space returns where the next bytes written go: up to n bytes from offset end, contiguous
// (to the buffer's end at most), growing the buffer when it is not yet full. The pump reads
// its pipe straight into it, outside the lock, then commits what it read. While attached, the
// space holds only bytes already sent (mayRead keeps the unsent ones under keep), so no sender
// reads it meanwhile.
func (r *outRing) space(n int) []byte {
	if len(r.buf) < r.size {
		want := min(r.size, int(r.end)+n)
		if want > cap(r.buf) {
			grown := make([]byte, len(r.buf), min(r.size, max(2*cap(r.buf), want)))
			copy(grown, r.buf)
			r.buf = grown
		}
		r.buf = r.buf[:want]
	}
	i := int(r.end % int64(r.size))
	return r.buf[i:min(len(r.buf), i+n)]
}

// commit records n bytes written into the slice space returned.
func (r *outRing) commit(n int) { r.end += int64(n) }

// read copies into dst the bytes from offset from (at least start) on and returns how many.
func (r *outRing) read(from int64, dst []byte) int {
	n := 0
	for n < len(dst) && from < r.end {
		i := from % int64(r.size)
		k := copy(dst[n:], r.buf[i:min(int64(len(r.buf)), i+r.end-from)])
		n += k
		from += int64(k)
	}
	return n
}

// attach starts an attachment: it replays from the last byte the host credited, or from the
// oldest byte kept when the ring lost some since, and returns how many were lost.
func (r *outRing) attach() (dropped int64) {
	from := max(r.credited, r.end-int64(r.keep))
	dropped = from - r.credited
	r.credited, r.sent = from, from
	r.inflight = r.inflight[:0]
	return dropped
}

// errOverCredit is a host that credited bytes it was not sent.
var errOverCredit = errors.New("the host credited bytes it was not sent")

// credit records that the attached host took n more bytes; the host credits each frame whole,
// so n ends the frames in flight it covers.
func (r *outRing) credit(n int) error {
	if r.credited+int64(n) > r.sent {
		return errOverCredit
	}
	r.credited += int64(n)
	for n > 0 && len(r.inflight) > 0 {
		k := min(n, r.inflight[0])
		n -= k
		if r.inflight[0] -= k; r.inflight[0] == 0 {
			r.inflight = r.inflight[1:]
		}
	}
	return nil
}

// settle frees the buffer once the pipe has ended and the host took every byte: an exited
// process the agent remembers then keeps nothing of its output it no longer owes.
func (r *outRing) settle() {
	if r.eof && r.credited == r.end {
		r.buf = nil
	}
}

// sentFrame records a frame of n bytes sent to the attached host.
func (r *outRing) sentFrame(n int) {
	r.sent += int64(n)
	r.inflight = append(r.inflight, n)
}

// mayRead says whether the pipe may be read now: always while detached; while attached, when
// the bytes the host has not credited are under a window (so a slow host stops the reads and
// the process blocks on its pipe) and those not yet sent are under keep (a read then cannot
// overwrite one: nothing is lost while attached). Bytes sent and not credited may be
// overwritten: an attachment after this one counts them as dropped.
func (r *outRing) mayRead(attached bool) bool {
	if r.eof {
		return false
	}
	return !attached || r.end-r.credited < proto.StreamWindow && r.end-r.sent < int64(r.keep)
}

// sendable is how many bytes the attachment may send now in one frame: those written and not
// yet sent, at most a chunk and the credit left of the window, and none while maxInflight
// frames are in flight (a process writing small pieces would otherwise overrun the host's
// queue of frames before its window of bytes). A frame under smallFrame waits, while another
// frame is in flight, for more bytes or for that frame's credit: so a process writing small
// pieces faster than the host takes them fills its frames (each costs a write to the port
// and a credit back), and one writing now and then has its bytes sent at once.
func (r *outRing) sendable() int {
	if len(r.inflight) >= maxInflight {
		return 0
	}
	credit := int64(proto.StreamWindow) - (r.sent - r.credited)
	n := int(max(0, min(r.end-r.sent, proto.StreamChunk, credit)))
	if n < smallFrame && len(r.inflight) > 0 && !r.eof {
		return 0
	}
	return n
}

// smallFrame is the size under which a frame waits for the one in flight (sendable).
const smallFrame = 64 << 10

// done says whether the attachment has sent the stream's last byte.
func (r *outRing) done() bool { return r.eof && r.sent == r.end }
