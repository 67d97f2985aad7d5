//go:build linux

package main

import (
	"encoding/json"
	"io"

	"github.com/iii-go/iii/sandbox-libkrun/guest/fsops"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// Streamed fs::read and fs::write (protocol revision 5, see proto/stream.go): the file moves
// in Data frames of at most proto.StreamChunk bytes under a window of proto.StreamWindow, so
// the agent holds at most a window of it.

// openStream registers stream id; it is called by the read loop before the next frame is read.
func (a *agent) openStream(id uint32) *proto.Stream {
	st := proto.NewStream()
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
// ended are dropped. The host's End also stops the stream: a read stops sending, and a write's
// reader still finds the End queued before it.
func (a *agent) deliverStream(f proto.Frame) {
	a.mu.Lock()
	st := a.streams[f.ID]
	a.mu.Unlock()
	if st == nil {
		return
	}
	st.Deliver(f)
	if f.Type == proto.TypeEnd {
		st.Stop()
	}
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
func (a *agent) streamRead(id uint32, st *proto.Stream, req json.RawMessage) {
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
			if !st.Take(n) {
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
func (a *agent) streamWrite(id uint32, st *proto.Stream, req json.RawMessage) {
	defer a.closeStream(id)
	res, ferr := fsops.WriteFrom(req, a.newHostReader(id, st))
	a.fsReply(id, res, ferr)
}

// hostReader reads a host→guest stream and grants credit as its bytes are taken.
type hostReader struct{ proto.Receiver }

func (a *agent) newHostReader(id uint32, st *proto.Stream) *hostReader {
	return &hostReader{proto.Receiver{
		Next: func() (proto.Frame, error) {
			select {
			case f := <-st.Frames:
				return f, nil
			case <-st.Stopped():
				select {
				case f := <-st.Frames:
					return f, nil
				default:
					return proto.Frame{}, proto.ErrStreamWindow
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
