package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// Streamed fs::read and fs::write (req A4): the file moves as Data frames of at most
// proto.StreamChunk bytes under the window of proto.StreamWindow, so the host holds at most a
// window of it, and readLoop never blocks on a slow consumer.

func (m *machine) openStream() (uint32, *proto.Stream) {
	id := m.nextID.Add(1)
	st := proto.NewStream()
	m.mu.Lock()
	m.pending[id] = &call{stream: st}
	m.mu.Unlock()
	return id, st
}

// next waits for the stream's next frame.
func (m *machine) next(ctx context.Context, st *proto.Stream) (proto.Frame, error) {
	select {
	case f := <-st.Frames:
		return f, nil
	default:
	}
	select {
	case f := <-st.Frames:
		return f, nil
	case <-st.Stopped():
		return proto.Frame{}, proto.ErrStreamWindow
	case <-m.connErr:
		return proto.Frame{}, ErrStopped
	case <-ctx.Done():
		return proto.Frame{}, ctx.Err()
	}
}

// replyResult decodes a Reply frame into its result or its error.
func replyResult(f proto.Frame) (json.RawMessage, error) {
	if f.Type != proto.TypeReply {
		return nil, fmt.Errorf("vm: the guest sent frame type %d before its reply", f.Type)
	}
	return decodeReply(f.Payload)
}

// FSRead starts a streamed fs::read; see vm.FSStreamer.
func (m *machine) FSRead(ctx context.Context, req json.RawMessage) (json.RawMessage, io.ReadCloser, error) {
	id, st := m.openStream()
	f, err := proto.Marshal(proto.TypeFS, id, proto.FS{Op: "read", Request: req, Stream: true})
	if err == nil {
		err = m.send(f)
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrStopped, err)
		}
	}
	if err == nil {
		f, err = m.next(ctx, st)
	}
	var head json.RawMessage
	if err == nil {
		head, err = replyResult(f)
	}
	if err != nil {
		m.forget(id)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			_ = m.send(proto.EndFrame(id, "cancelled by the host"))
		}
		return nil, nil, err
	}
	return head, m.newStreamReader(id, st), nil
}

// streamReader reads a guest→host stream and grants credit as its bytes are taken.
type streamReader struct {
	proto.Receiver
	m      *machine
	id     uint32
	ctx    context.Context // cancelled by Close, with errReaderClosed as its cause
	cancel context.CancelCauseFunc
	once   sync.Once
}

func (m *machine) newStreamReader(id uint32, st *proto.Stream) *streamReader {
	r := &streamReader{m: m, id: id}
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	r.Receiver = proto.Receiver{
		Next: func() (proto.Frame, error) {
			f, err := m.next(r.ctx, st)
			if err != nil && r.ctx.Err() != nil {
				err = context.Cause(r.ctx)
			}
			return f, err
		},
		Grant: func(n int) error {
			if err := m.send(proto.CreditFrame(id, n)); err != nil {
				return fmt.Errorf("%w: %w", ErrStopped, err)
			}
			return nil
		},
		AbortPrefix: "the guest aborted the read: ",
	}
	return r
}

// Close ends the stream and tells the guest to stop sending (a guest that already finished
// drops the End). It may be called while a Read waits, which then fails; later Reads return
// what was already queued, then fail.
func (r *streamReader) Close() error {
	r.once.Do(func() {
		r.cancel(errReaderClosed)
		r.m.forget(r.id)
		_ = r.m.send(proto.EndFrame(r.id, "closed by the host"))
	})
	return nil
}

var errReaderClosed = errors.New("vm: the read stream was closed")

// FSWrite runs a streamed fs::write; see vm.FSStreamer.
func (m *machine) FSWrite(ctx context.Context, req json.RawMessage, body io.Reader) (json.RawMessage, error) {
	id, st := m.openStream()
	defer m.forget(id)
	f, err := proto.Marshal(proto.TypeFS, id, proto.FS{Op: "write", Request: req, Stream: true})
	if err != nil {
		return nil, err
	}
	if err := m.send(f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStopped, err)
	}
	abort := func(reason string) { _ = m.send(proto.EndFrame(id, reason)) }
	buf := make([]byte, proto.StreamChunk)
	for {
		n, rerr := io.ReadFull(body, buf)
		if n > 0 {
			if early, err := m.waitCredit(ctx, st, n); early != nil || err != nil {
				if early != nil {
					return replyResult(*early) // the guest refused the write before its end
				}
				abort("host: " + err.Error())
				return nil, err
			}
			if err := m.send(proto.Frame{Type: proto.TypeData, ID: id, Payload: buf[:n]}); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrStopped, err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			abort("the host's source failed: " + rerr.Error())
			return nil, rerr
		}
	}
	if err := m.send(proto.EndFrame(id, "")); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStopped, err)
	}
	for {
		f, err := m.next(ctx, st)
		if err != nil {
			return nil, err
		}
		if f.Type == proto.TypeReply {
			return replyResult(f)
		}
	}
}

// waitCredit takes n bytes of credit, waiting for the guest to grant them. A Reply that comes
// first (the guest refused the write) is returned as early.
func (m *machine) waitCredit(ctx context.Context, st *proto.Stream, n int) (*proto.Frame, error) {
	for {
		select {
		case f := <-st.Frames:
			if f.Type == proto.TypeReply {
				return &f, nil
			}
			continue
		default:
		}
		if st.Win.TryTake(n) {
			return nil, nil
		}
		select {
		case <-st.Win.More():
		case f := <-st.Frames:
			if f.Type == proto.TypeReply {
				return &f, nil
			}
		case <-st.Stopped():
			return nil, proto.ErrStreamWindow
		case <-m.connErr:
			return nil, ErrStopped
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

var _ vm.FSStreamer = (*machine)(nil)
