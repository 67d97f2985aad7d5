//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/iii-go/iii/sandbox-libkrun/guest/fsops"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// Streamed fs::read and fs::write (protocol revision 5, see proto/stream.go): the file moves
// in Data frames of at most proto.StreamChunk bytes under a window of proto.StreamWindow, so
// the agent holds at most a window of it.

// gstream is the guest end of one streamed fs op.
type gstream struct {
	in chan proto.Frame // a write's Data and End from the host

	win   *proto.Window // a read's bytes the host may still take
	ended chan struct{} // closed when the host ends a read early
	once  sync.Once
}

// openStream registers stream id; it is called by the read loop before the next frame is read.
func (a *agent) openStream(id uint32) *gstream {
	st := &gstream{in: make(chan proto.Frame, proto.StreamWindow/proto.StreamChunk+4),
		win: proto.NewWindow(), ended: make(chan struct{})}
	a.mu.Lock()
	a.streams[id] = st
	a.mu.Unlock()
	return st
}

func (a *agent) closeStream(id uint32) {
	a.mu.Lock()
	delete(a.streams, id)
	a.mu.Unlock()
}

// deliverStream routes a Data, End or Credit frame to its stream; frames of a stream that has
// ended are dropped.
func (a *agent) deliverStream(f proto.Frame) {
	a.mu.Lock()
	st := a.streams[f.ID]
	a.mu.Unlock()
	if st == nil {
		return
	}
	switch f.Type {
	case proto.TypeCredit:
		n, err := proto.ParseCredit(f.Payload)
		if err != nil {
			st.end()
			return
		}
		st.win.Grant(n)
	case proto.TypeEnd:
		st.push(f) // first: a reader that sees ended still finds the End queued
		st.end()
	case proto.TypeData:
		st.push(f)
	}
}

// push queues a frame of a write; a host that overruns the window ends the stream.
func (st *gstream) push(f proto.Frame) {
	select {
	case st.in <- f:
	default:
		st.end()
	}
}

func (st *gstream) end() { st.once.Do(func() { close(st.ended) }) }

// take waits until the host grants n bytes; false when it ended the stream instead.
func (st *gstream) take(n int) bool {
	for !st.win.TryTake(n) {
		select {
		case <-st.win.More():
		case <-st.ended:
			return false
		}
	}
	return true
}

func (a *agent) fsReply(id uint32, res json.RawMessage, ferr *fsops.Error) {
	if ferr != nil {
		a.sendJSON(proto.TypeReply, id, proto.Reply{Error: &proto.Error{Code: ferr.Code, Message: ferr.Message, Fix: ferr.Fix}})
		return
	}
	a.sendJSON(proto.TypeReply, id, proto.Reply{Result: res})
}

// streamRead answers a streamed fs::read: the Reply with the head, then the file in Data
// frames as the host grants credit, then an End (with a reason when reading failed).
func (a *agent) streamRead(id uint32, st *gstream, req json.RawMessage) {
	defer a.closeStream(id)
	rd, ferr := fsops.OpenRead(req)
	if ferr != nil {
		a.fsReply(id, nil, ferr)
		return
	}
	defer rd.Close()
	a.fsReply(id, rd.Head, nil)
	buf := make([]byte, proto.StreamChunk)
	for {
		n, err := io.ReadFull(rd, buf)
		if n > 0 {
			if !st.take(n) {
				return
			}
			a.send(proto.Frame{Type: proto.TypeData, ID: id, Payload: buf[:n]})
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			a.send(proto.EndFrame(id, ""))
			return
		}
		if err != nil {
			a.send(proto.EndFrame(id, "fs i/o error: "+err.Error()))
			return
		}
	}
}

// streamWrite answers a streamed fs::write once the host's bytes ended and the file is written.
func (a *agent) streamWrite(id uint32, st *gstream, req json.RawMessage) {
	defer a.closeStream(id)
	res, ferr := fsops.WriteFrom(req, a.newHostReader(id, st))
	a.fsReply(id, res, ferr)
}

// hostReader reads a host→guest stream and grants credit as its bytes are taken.
type hostReader struct{ proto.Receiver }

var errOverrun = errors.New("the host sent beyond its window")

func (a *agent) newHostReader(id uint32, st *gstream) *hostReader {
	return &hostReader{proto.Receiver{
		Next: func() (proto.Frame, error) {
			select {
			case f := <-st.in:
				return f, nil
			case <-st.ended:
				select {
				case f := <-st.in:
					return f, nil
				default:
					return proto.Frame{}, errOverrun
				}
			}
		},
		Grant: func(n int) error { a.send(proto.CreditFrame(id, n)); return nil },
	}}
}

// WriteChunksTo writes the host's bytes to w frame by frame, without copying them
// (fsops.ChunkSource).
func (r *hostReader) WriteChunksTo(w io.Writer) (int64, error) {
	var n int64
	for {
		b, err := r.Chunk()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, &fsops.SourceError{Err: err}
		}
		k, err := w.Write(b)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
}
