package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Stream channels (req A4). fs::read answers {content: StreamChannelRef, body?, size, mode,
// mtime}: content is the read end of a fresh engine channel into which the adapter streams the
// file's bytes in the background as the guest sends them, then closes it (body only for valid
// UTF-8 files of at most 1 MiB, as the guest decides). fs::write takes exactly one of content
// (a UTF-8 string, or the read end of a channel the caller writes the file into) and
// content_b64; a channel's bytes go on to the guest as they arrive. Neither direction holds more
// than a few chunks of a file here (vm.FSStreamer, proto.StreamWindow). A channel that cannot be
// opened or aborts mid-op is S218 "fs channel aborted: {detail}"; a channel fs::read writes that
// the caller abandons, or a guest read that fails midway, aborts that channel with the reason.

// ReadStreamTimeout bounds how long fs::read keeps its channel open for the caller to read it.
const ReadStreamTimeout = 5 * time.Minute

// copyChunk is the buffer of a stream copy: one channel frame.
const copyChunk = protocol.ChannelChunk

// Channels creates and opens engine stream channels; *protocol.Worker is one.
type Channels interface {
	CreateChannel(ctx context.Context) (reader, writer protocol.ChannelRef, err error)
	OpenReader(ctx context.Context, ref protocol.ChannelRef) (io.ReadCloser, error)
	OpenWriter(ctx context.Context, ref protocol.ChannelRef) (io.WriteCloser, error)
}

// ReadReply is the reply of fs::read.
type ReadReply struct {
	Content protocol.ChannelRef `json:"content"`
	Body    *string             `json:"body,omitempty"`
	Size    uint64              `json:"size"`
	Mode    string              `json:"mode"`
	Mtime   int64               `json:"mtime"`
}

func channelDetail(err error) string {
	var ae *protocol.ChannelAbortedError
	if errors.As(err, &ae) {
		return ae.Detail
	}
	return err.Error()
}

// fsHandler validates sandbox_id, bumps the idle clock and forwards the rest of the request to
// the guest agent.
func (s *Service) fsHandler(op string) Handler {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		trimmed := bytes.TrimSpace(raw)
		if len(trimmed) == 0 || trimmed[0] != '{' {
			return nil, scode.Invalid("the request must be a JSON object with sandbox_id")
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &body); err != nil {
			return nil, scode.Invalid(err.Error())
		}
		var sid string
		if rawID, ok := body["sandbox_id"]; ok {
			if err := json.Unmarshal(rawID, &sid); err != nil {
				return nil, scode.Invalid("field `sandbox_id` must be a string")
			}
		}
		delete(body, "sandbox_id")
		switch op {
		case "write":
			return s.fsWrite(ctx, sid, body)
		case "read":
			fwd, _ := json.Marshal(body)
			return s.fsRead(ctx, sid, fwd)
		}
		fwd, _ := json.Marshal(body)
		return s.fs(ctx, sid, op, fwd)
	}
}

// fsWrite forwards an inline write, or streams a channel content to the guest.
func (s *Service) fsWrite(ctx context.Context, sid string, body map[string]json.RawMessage) (any, error) {
	id, err := checkID(sid)
	if err != nil {
		return nil, err
	}
	if _, err := s.admit(id, false); err != nil {
		return nil, err
	}
	content := bytes.TrimSpace(body["content"])
	hasContent := len(content) > 0 && string(content) != "null"
	b64 := bytes.TrimSpace(body["content_b64"])
	if hasContent == (len(b64) > 0 && string(b64) != "null") {
		return nil, scode.FS(scode.S210, "exactly one of `content` and `content_b64` is required")
	}
	if !hasContent || content[0] != '{' {
		fwd, _ := json.Marshal(body)
		return s.fs(ctx, sid, "write", fwd)
	}
	var ref protocol.ChannelRef
	if err := json.Unmarshal(content, &ref); err != nil || ref.Direction != protocol.ChannelRead || ref.ChannelID == "" || ref.AccessKey == "" {
		return nil, scode.FS(scode.S210, "`content` must be a UTF-8 string or the read end of a stream channel: {\"channel_id\", \"access_key\", \"direction\": \"read\"}")
	}
	if s.opt.Channels == nil {
		return nil, scode.ChannelAborted("this adapter has no engine connection for stream channels")
	}
	rc, err := s.opt.Channels.OpenReader(ctx, ref)
	if err != nil {
		return nil, scode.ChannelAborted(channelDetail(err))
	}
	defer rc.Close()
	delete(body, "content")
	fwd, _ := json.Marshal(body)
	return s.onMachine(ctx, sid, func(ctx context.Context, box *sandbox) (json.RawMessage, error) {
		st, ok := box.machine.(vm.FSStreamer)
		if !ok {
			return nil, unsupported()
		}
		src := &source{r: rc, onRead: func() { s.touch(box) }}
		out, err := st.FSWrite(ctx, fwd, src)
		if src.err != nil {
			return nil, scode.ChannelAborted(channelDetail(src.err))
		}
		return out, err
	})
}

// source remembers the error its reader failed with, and calls onRead after each read that
// moved bytes: a stream in progress keeps its sandbox from being reaped as idle.
type source struct {
	r      io.Reader
	onRead func()
	err    error
}

func (s *source) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	if n > 0 {
		s.onRead()
	}
	return n, err
}

func unsupported() *scode.Error {
	return scode.FS(scode.S219, "fs operation unsupported by this sandbox supervisor; upgrade iii-worker to enable fs::* triggers (see S219 docs)")
}

// fsRead starts the guest's read and hands its bytes out through a fresh channel as they come.
func (s *Service) fsRead(ctx context.Context, sid string, req json.RawMessage) (any, error) {
	var (
		body io.ReadCloser
		box  *sandbox
	)
	raw, err := s.onMachine(ctx, sid, func(ctx context.Context, b *sandbox) (json.RawMessage, error) {
		st, ok := b.machine.(vm.FSStreamer)
		if !ok {
			return nil, unsupported()
		}
		head, rc, err := st.FSRead(ctx, req)
		body, box = rc, b
		return head, err
	})
	if err != nil {
		return nil, err
	}
	var g struct {
		Body  *string `json:"body"`
		Size  uint64  `json:"size"`
		Mode  string  `json:"mode"`
		Mtime int64   `json:"mtime"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		body.Close()
		return nil, scode.FS(scode.S216, "fs i/o error: unreadable guest reply: "+err.Error())
	}
	if s.opt.Channels == nil {
		body.Close()
		return nil, scode.ChannelAborted("this adapter has no engine connection for stream channels")
	}
	rref, wref, err := s.opt.Channels.CreateChannel(ctx)
	if err != nil {
		body.Close()
		return nil, scode.ChannelAborted("cannot create a channel: " + err.Error())
	}
	sctx, cancel := context.WithTimeout(s.streamCtx, ReadStreamTimeout)
	w, err := s.opt.Channels.OpenWriter(sctx, wref)
	if err != nil {
		cancel()
		body.Close()
		return nil, scode.ChannelAborted(channelDetail(err))
	}
	s.streams.Add(1)
	go func() {
		defer s.streams.Done()
		defer cancel()
		stop := context.AfterFunc(sctx, func() { body.Close() })
		defer stop()
		defer body.Close()
		src := &source{r: body, onRead: func() { s.touch(box) }}
		if _, err := io.CopyBuffer(w, src, make([]byte, copyChunk)); err != nil {
			if src.err != nil && sctx.Err() == nil {
				_ = abortWriter(w, "the guest's read failed: "+src.err.Error())
			}
			s.opt.Logf("fs::read stream of channel %s ended early: %s", rref.ChannelID, channelDetail(err))
			return
		}
		_ = w.Close()
	}()
	return ReadReply{Content: rref, Body: g.Body, Size: g.Size, Mode: g.Mode, Mtime: g.Mtime}, nil
}

// abortWriter aborts a channel writer that can be aborted, else closes it.
func abortWriter(w io.WriteCloser, reason string) error {
	if a, ok := w.(interface{ Abort(string) error }); ok {
		return a.Abort(reason)
	}
	return w.Close()
}

// fs runs one fs op on a live sandbox. Guest failures keep their S21x code.
func (s *Service) fs(ctx context.Context, sandboxID, op string, req json.RawMessage) (json.RawMessage, error) {
	return s.onMachine(ctx, sandboxID, func(ctx context.Context, box *sandbox) (json.RawMessage, error) {
		return box.machine.FS(ctx, op, req)
	})
}

// onMachine runs do on the machine of a live sandbox and maps its failure to an S-code: a
// guest failure keeps its S21x code, an *scode.Error passes as it is.
func (s *Service) onMachine(ctx context.Context, sandboxID string, do func(context.Context, *sandbox) (json.RawMessage, error)) (json.RawMessage, error) {
	id, err := checkID(sandboxID)
	if err != nil {
		return nil, err
	}
	box, err := s.admit(id, false)
	if err != nil {
		return nil, err
	}
	reply, err := do(ctx, box)
	s.touch(box)
	if err != nil {
		if e, ok := scode.As(err); ok {
			return nil, e
		}
		var fe *vm.FSError
		if errors.As(err, &fe) {
			code := fe.Code
			if !scode.Known(code) {
				code = scode.S216
			}
			e := scode.FS(code, fe.Message)
			if len(fe.Fix) > 0 {
				e.Fix = fe.Fix
			}
			return nil, e
		}
		if machineDone(box.machine) {
			return nil, scode.Stopped(id)
		}
		return nil, scode.FS(scode.S216, "fs i/o error: "+err.Error())
	}
	return reply, nil
}

func (s *Service) touch(box *sandbox) {
	s.mu.Lock()
	box.lastActive = s.opt.Now()
	s.mu.Unlock()
}
