package adapter

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// memFS is a guest stand-in for read and write: files in memory, replies as the guest's.
type memFS struct {
	mu    sync.Mutex
	files map[string][]byte
}

func (f *memFS) do(op string, req map[string]any) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path, _ := req["path"].(string)
	switch op {
	case "write":
		var data []byte
		if c, ok := req["content"].(string); ok {
			data = []byte(c)
		} else {
			b, err := base64.StdEncoding.DecodeString(req["content_b64"].(string))
			if err != nil {
				return nil, err
			}
			data = b
		}
		f.files[path] = data
		return json.Marshal(map[string]any{"bytes_written": len(data), "path": path})
	case "read":
		data, ok := f.files[path]
		if !ok {
			return nil, &vm.FSError{Code: "S211", Message: "file not found: " + path}
		}
		out := map[string]any{"content_b64": base64.StdEncoding.EncodeToString(data), "size": len(data), "mode": "0644", "mtime": 1700000000}
		if len(data) <= 1<<20 && utf8.Valid(data) {
			out["body"] = string(data)
		}
		return json.Marshal(out)
	}
	return json.RawMessage(`{"ok":true}`), nil
}

// FSRead streams the file of fsFn's reply to "read", whose content_b64 is the file.
func (m *fakeMachine) FSRead(ctx context.Context, req json.RawMessage) (json.RawMessage, io.ReadCloser, error) {
	raw, err := m.FS(ctx, "read", req)
	if err != nil {
		return nil, nil, err
	}
	var r map[string]any
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, nil, err
	}
	s, _ := r["content_b64"].(string)
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, nil, err
	}
	delete(r, "content_b64")
	head, _ := json.Marshal(r)
	var body io.Reader = bytes.NewReader(data)
	m.mu.Lock()
	if m.readErr != nil {
		body = io.MultiReader(body, iotest.ErrReader(m.readErr))
	}
	closed := m.closed
	m.mu.Unlock()
	return head, &closeSignal{Reader: body, closed: closed}, nil
}

// closeSignal is a read body that reports its Close.
type closeSignal struct {
	io.Reader
	closed chan struct{}
	once   sync.Once
}

func (c *closeSignal) Close() error {
	c.once.Do(func() {
		if c.closed != nil {
			c.closed <- struct{}{}
		}
	})
	return nil
}

// FSWrite hands the streamed bytes to fsFn's "write" as content_b64.
func (m *fakeMachine) FSWrite(ctx context.Context, req json.RawMessage, body io.Reader) (json.RawMessage, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	var r map[string]any
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, err
	}
	r["content_b64"] = base64.StdEncoding.EncodeToString(data)
	b, _ := json.Marshal(r)
	return m.FS(ctx, "write", b)
}

// engineWorker starts an in-process engine of opts and returns a worker connected to it.
func engineWorker(t *testing.T, opts core.Options) *protocol.Worker {
	t.Helper()
	srv := enginetest.Start(t, core.New(opts))
	w := protocol.NewWorker(protocol.Config{URL: srv.URL, Name: "adapter-test", NoReconnect: true})
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := w.Start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func refOf(t *testing.T, v any) protocol.ChannelRef {
	t.Helper()
	b, _ := json.Marshal(v)
	var r protocol.ChannelRef
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// channelHarness is an adapter wired to a real engine's channels, with an in-memory guest
// filesystem (returned for inspection) and one python sandbox.
func channelHarness(t *testing.T) (*harness, *protocol.Worker, *memFS, string) {
	t.Helper()
	w := engineWorker(t, core.Options{})
	h := newHarness(t, nil, nil)
	h.svc.opt.Channels = w
	mem := &memFS{files: map[string][]byte{}}
	h.drv.fsFn = mem.do
	return h, w, mem, h.create(t, `{"image":"python"}`)
}

func TestFSReadWriteChannels(t *testing.T) {
	h, w, _, id := channelHarness(t)
	ctx := context.Background()

	// A binary file written through a channel reads back identically through one.
	want := make([]byte, 100<<10)
	_, _ = rand.Read(want)
	rref, wref, err := w.CreateChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wr, err := w.OpenWriter(ctx, wref)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = wr.Write(want); wr.Close() }()
	ref, _ := json.Marshal(rref)
	r := h.mustCall(t, "fs::write", `{"sandbox_id":"`+id+`","path":"/bin.dat","content":`+string(ref)+`}`)
	if r["bytes_written"] != float64(len(want)) {
		t.Fatalf("write reply %v", r)
	}
	r = h.mustCall(t, "fs::read", `{"sandbox_id":"`+id+`","path":"/bin.dat"}`)
	if _, ok := r["body"]; ok || r["size"] != float64(len(want)) || r["content_b64"] != nil {
		t.Fatalf("read reply %v", r)
	}
	content := refOf(t, r["content"])
	if content.Direction != protocol.ChannelRead {
		t.Fatalf("content %+v", content)
	}
	rd, err := w.OpenReader(ctx, content)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want %d", len(got), err, len(want))
	}

	// A text file has a body too; string content still works.
	h.mustCall(t, "fs::write", `{"sandbox_id":"`+id+`","path":"/t.txt","content":"héllo"}`)
	r = h.mustCall(t, "fs::read", `{"sandbox_id":"`+id+`","path":"/t.txt"}`)
	if r["body"] != "héllo" {
		t.Fatalf("read reply %v", r)
	}
	rd, err = w.OpenReader(ctx, refOf(t, r["content"]))
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(rd)
	rd.Close()
	if err != nil || string(got) != "héllo" {
		t.Fatalf("%q %v", got, err)
	}
}

func TestFSWriteChannelErrors(t *testing.T) {
	h, w, mem, id := channelHarness(t)
	ctx := context.Background()
	pre := `{"sandbox_id":"` + id + `","path":"/f"`

	_, e := h.call(t, "fs::write", pre+`,"content":"a","content_b64":"YQ=="}`)
	wantCode(t, e, scode.S210, "exactly one of `content` and `content_b64`")
	_, e = h.call(t, "fs::write", pre+`}`)
	wantCode(t, e, scode.S210, "exactly one of `content` and `content_b64`")
	rref, wref, err := w.CreateChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wrongDir, _ := json.Marshal(wref)
	_, e = h.call(t, "fs::write", pre+`,"content":`+string(wrongDir)+`}`)
	wantCode(t, e, scode.S210, "read end of a stream channel")

	// The writer aborts mid-stream: S218, retryable, and nothing is written.
	wr, err := protocol.DialWriter(ctx, w.URL(), wref)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = wr.Write([]byte("half a file")); wr.Abort("client crashed") }()
	ref, _ := json.Marshal(rref)
	_, e = h.call(t, "fs::write", pre+`,"content":`+string(ref)+`}`)
	wantCode(t, e, scode.S218, "fs channel aborted: writer aborted: client crashed")
	if !e.Retryable || e.Type != scode.TypeTransient {
		t.Fatalf("S218 envelope %+v", e)
	}
	if _, ok := mem.files["/f"]; ok {
		t.Fatal("an aborted channel wrote the file")
	}

	// A ref the engine does not know: S218 too.
	bad := rref
	bad.AccessKey = "0"
	ref, _ = json.Marshal(bad)
	_, e = h.call(t, "fs::write", pre+`,"content":`+string(ref)+`}`)
	wantCode(t, e, scode.S218, "fs channel aborted: opening channel")

	// Without an engine connection channel content is S218; the sandbox is checked first.
	h.svc.opt.Channels = nil
	_, e = h.call(t, "fs::read", pre+`}`)
	wantCode(t, e, scode.S211, "file not found: /f")
	mem.files["/f"] = []byte("x")
	_, e = h.call(t, "fs::read", pre+`}`)
	wantCode(t, e, scode.S218, "no engine connection")
	_, e = h.call(t, "fs::write", `{"sandbox_id":"00000000-0000-4000-8000-000000000000","path":"/f","content":"x"}`)
	wantCode(t, e, scode.S002, "sandbox not found")
}

// TestFSReadStreamEndsOnShutdown: a stream nobody reads ends when the service shuts down.
func TestFSReadStreamEndsOnShutdown(t *testing.T) {
	w := engineWorker(t, core.Options{})
	h := newHarness(t, nil, nil)
	h.svc.opt.Channels = w
	mem := &memFS{files: map[string][]byte{"/big": make([]byte, 30<<20)}}
	h.drv.fsFn = mem.do
	id := h.create(t, `{"image":"python"}`)
	r := h.mustCall(t, "fs::read", `{"sandbox_id":"`+id+`","path":"/big"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.svc.Shutdown(ctx)
	if ctx.Err() != nil {
		t.Fatal("shutdown waited for an unread stream")
	}
	rd, err := w.OpenReader(context.Background(), refOf(t, r["content"]))
	if err == nil {
		_, err = io.ReadAll(rd)
		rd.Close()
		var ae *protocol.ChannelAbortedError
		if !errors.As(err, &ae) {
			t.Fatalf("want an abort after shutdown, got %v", err)
		}
	}
}

// TestFSReadGuestFailureAbortsChannel: a guest read that fails midway aborts the channel with
// the reason, after the bytes that came before.
func TestFSReadGuestFailureAbortsChannel(t *testing.T) {
	h, w, mem, id := channelHarness(t)
	mem.files["/f"] = bytes.Repeat([]byte{1}, 600<<10)
	h.drv.mu.Lock()
	for _, m := range h.drv.machines {
		m.mu.Lock()
		m.readErr = errors.New("input/output error")
		m.mu.Unlock()
	}
	h.drv.mu.Unlock()
	r := h.mustCall(t, "fs::read", `{"sandbox_id":"`+id+`","path":"/f"}`)
	rd, err := w.OpenReader(context.Background(), refOf(t, r["content"]))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	rd.Close()
	var ae *protocol.ChannelAbortedError
	if !errors.As(err, &ae) || ae.Detail != "writer aborted: the guest's read failed: input/output error" || len(got) != 600<<10 {
		t.Fatalf("read %d bytes, then %v", len(got), err)
	}
}

// TestFSReadReaderLeaves: a caller that stops reading fs::read's channel midway ends the
// guest's read (its body is closed) instead of leaving it to stall.
func TestFSReadReaderLeaves(t *testing.T) {
	h, w, mem, id := channelHarness(t)
	mem.files["/big"] = make([]byte, 20<<20)
	closed := make(chan struct{}, 1)
	h.drv.mu.Lock()
	for _, m := range h.drv.machines {
		m.mu.Lock()
		m.closed = closed
		m.mu.Unlock()
	}
	h.drv.mu.Unlock()
	r := h.mustCall(t, "fs::read", `{"sandbox_id":"`+id+`","path":"/big"}`)
	rd, err := w.OpenReader(context.Background(), refOf(t, r["content"]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rd, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the guest's read was not ended after its reader left")
	}
}

// TestFSReadStreamKeepsSandboxAlive: bytes moving on an fs::read channel count as activity, so
// the reaper does not stop a sandbox whose file is still being read past its idle timeout.
func TestFSReadStreamKeepsSandboxAlive(t *testing.T) {
	h, w, mem, id := channelHarness(t)
	mem.files["/big"] = make([]byte, 20<<20)
	r := h.mustCall(t, "fs::read", `{"sandbox_id":"`+id+`","path":"/big"}`)
	rd, err := w.OpenReader(context.Background(), refOf(t, r["content"]))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := io.ReadFull(rd, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	// The channel's buffers hold a few MiB at most: reading the rest makes the adapter read
	// most of the file from the guest after the clock moved.
	h.clock.Add(24 * time.Hour)
	if n, err := io.Copy(io.Discard, rd); err != nil || n != 19<<20 {
		t.Fatalf("read %d more bytes: %v", n, err)
	}
	h.svc.Reap()
	for _, row := range h.mustCall(t, "list", `{}`)["sandboxes"].([]any) {
		if row := row.(map[string]any); row["sandbox_id"] == id && row["stopped"] != false {
			t.Fatalf("reaped while its file was being read: %v", row)
		}
	}
}
