package qemu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// streamPair is a machine whose control port is one end of a socket pair; the test plays the
// guest on the other end.
func streamPair(t *testing.T) (*machine, net.Conn, *bufio.Reader) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	m := &machine{conn: conns[0], pending: map[uint32]*call{}, connErr: make(chan struct{}), done: make(chan struct{})}
	go m.readLoop()
	t.Cleanup(func() { conns[0].Close(); conns[1].Close() })
	return m, conns[1], bufio.NewReader(conns[1])
}

func readFrame(t *testing.T, r *bufio.Reader) proto.Frame {
	t.Helper()
	f, err := proto.Read(r)
	if err != nil {
		t.Errorf("guest: %v", err)
	}
	return f
}

func writeFrame(t *testing.T, c net.Conn, f proto.Frame) {
	t.Helper()
	if err := proto.Write(c, f); err != nil {
		t.Errorf("guest: %v", err)
	}
}

func reply(t *testing.T, c net.Conn, id uint32, v any) {
	t.Helper()
	res, _ := json.Marshal(v)
	f, _ := proto.Marshal(proto.TypeReply, id, proto.Reply{Result: res})
	writeFrame(t, c, f)
}

// TestFSReadStream: the guest sends the head, then a file larger than the window, never more
// than the credit the host granted; the host reads it whole and in order.
func TestFSReadStream(t *testing.T) {
	m, gc, gr := streamPair(t)
	want := make([]byte, 2*proto.StreamWindow+12345)
	for i := range want {
		want[i] = byte(i * 7)
	}
	guestDone := make(chan struct{})
	go func() {
		defer close(guestDone)
		f := readFrame(t, gr)
		var fs proto.FS
		if json.Unmarshal(f.Payload, &fs); f.Type != proto.TypeFS || fs.Op != "read" || !fs.Stream {
			t.Errorf("guest got %v %s", f.Type, f.Payload)
			return
		}
		reply(t, gc, f.ID, map[string]any{"size": len(want)})
		credit := proto.StreamWindow
		for rest := want; len(rest) > 0; {
			n := min(len(rest), proto.StreamChunk)
			for credit < n {
				c := readFrame(t, gr)
				k, err := proto.ParseCredit(c.Payload)
				if c.Type != proto.TypeCredit || c.ID != f.ID || err != nil {
					t.Errorf("guest waited for credit, got %v", c.Type)
					return
				}
				credit += k
			}
			writeFrame(t, gc, proto.Frame{Type: proto.TypeData, ID: f.ID, Payload: rest[:n]})
			credit -= n
			rest = rest[n:]
		}
		writeFrame(t, gc, proto.EndFrame(f.ID, ""))
	}()
	head, body, err := m.FSRead(context.Background(), json.RawMessage(`{"path":"/f"}`))
	if err != nil || string(head) != `{"size":`+itoa(len(want))+`}` {
		t.Fatalf("head %s, %v", head, err)
	}
	got, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(body, 3)))
	if err != nil || !bytes.Equal(got, want[:3]) {
		t.Fatalf("first bytes %v %v", got, err)
	}
	rest, err := io.ReadAll(body)
	if err != nil || !bytes.Equal(append(got, rest...), want) {
		t.Fatalf("read %d bytes, %v", len(got)+len(rest), err)
	}
	body.Close()
	<-guestDone
}

// TestFSReadErrors: a guest failure before the stream is an FSError; an abort midway is the
// error of Read; a guest that overruns the window breaks the stream; Close before the end tells
// the guest to stop.
func TestFSReadErrors(t *testing.T) {
	m, gc, gr := streamPair(t)
	ctx := context.Background()

	go func() {
		f := readFrame(t, gr)
		e, _ := proto.Marshal(proto.TypeReply, f.ID, proto.Reply{Error: &proto.Error{Code: "S211", Message: "file not found: /f"}})
		writeFrame(t, gc, e)
	}()
	var fe *vm.FSError
	if _, _, err := m.FSRead(ctx, json.RawMessage(`{"path":"/f"}`)); !errors.As(err, &fe) || fe.Code != "S211" {
		t.Fatalf("missing file: %v", err)
	}

	go func() {
		f := readFrame(t, gr)
		reply(t, gc, f.ID, map[string]any{})
		writeFrame(t, gc, proto.Frame{Type: proto.TypeData, ID: f.ID, Payload: []byte("abc")})
		writeFrame(t, gc, proto.EndFrame(f.ID, "fs i/o error: input/output error"))
	}()
	_, body, err := m.FSRead(ctx, json.RawMessage(`{"path":"/f"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	if string(got) != "abc" || err == nil || !strings.Contains(err.Error(), "the guest aborted the read: fs i/o error: input/output error") {
		t.Fatalf("aborted read: %q %v", got, err)
	}
	body.Close()
	if f := readFrame(t, gr); f.Type != proto.TypeCredit {
		t.Fatalf("after the abort the guest got %v, want the credit of the bytes taken", f.Type)
	}
	if f := readFrame(t, gr); f.Type != proto.TypeEnd {
		t.Fatalf("after Close the guest got %v, want End", f.Type)
	}

	go func() {
		f := readFrame(t, gr)
		reply(t, gc, f.ID, map[string]any{})
		// Write errors are not reported: once the stream breaks the test ends and closes the
		// connection while this guest may still be writing.
		for i := 0; i < proto.StreamQueue+2; i++ {
			if proto.Write(gc, proto.Frame{Type: proto.TypeData, ID: f.ID, Payload: make([]byte, proto.StreamChunk)}) != nil {
				return
			}
		}
	}()
	_, body, err = m.FSRead(ctx, json.RawMessage(`{"path":"/f"}`))
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	c := m.pending[m.nextID.Load()]
	m.mu.Unlock()
	select {
	case <-c.stream.Stopped():
	case <-time.After(10 * time.Second):
		t.Fatal("a guest beyond its window did not break the stream")
	}
	if _, err := io.ReadAll(body); !errors.Is(err, proto.ErrStreamWindow) {
		t.Fatalf("overrun: %v", err)
	}
	body.Close()
}

// TestFSWriteStream: the host sends the file under the guest's credit and an End; a source
// that fails sends an End with the reason and returns the source's error; a guest that refuses
// the write stops the host at once.
func TestFSWriteStream(t *testing.T) {
	m, gc, gr := streamPair(t)
	ctx := context.Background()
	want := bytes.Repeat([]byte("0123456789"), (2*proto.StreamWindow)/10+77)
	go func() {
		f := readFrame(t, gr)
		var fs proto.FS
		if json.Unmarshal(f.Payload, &fs); fs.Op != "write" || !fs.Stream {
			t.Errorf("guest got %s", f.Payload)
		}
		var got []byte
		inFlight := 0
		for {
			d := readFrame(t, gr)
			if d.Type == proto.TypeEnd {
				if len(d.Payload) != 0 || !bytes.Equal(got, want) {
					t.Errorf("guest got %d bytes then End %q", len(got), d.Payload)
				}
				reply(t, gc, f.ID, map[string]any{"bytes_written": len(got)})
				return
			}
			got = append(got, d.Payload...)
			if inFlight += len(d.Payload); inFlight > proto.StreamWindow {
				t.Errorf("the host sent %d bytes beyond its credit", inFlight)
			}
			writeFrame(t, gc, proto.CreditFrame(f.ID, len(d.Payload)))
			inFlight -= len(d.Payload)
		}
	}()
	out, err := m.FSWrite(ctx, json.RawMessage(`{"path":"/f"}`), bytes.NewReader(want))
	if err != nil || string(out) != `{"bytes_written":`+itoa(len(want))+`}` {
		t.Fatalf("write: %s %v", out, err)
	}

	srcErr := errors.New("writer aborted: gone")
	ended := make(chan string, 1)
	go func() {
		readFrame(t, gr)
		for {
			d := readFrame(t, gr)
			if d.Type == proto.TypeEnd {
				ended <- string(d.Payload)
				return
			}
		}
	}()
	_, err = m.FSWrite(ctx, json.RawMessage(`{"path":"/f"}`), io.MultiReader(bytes.NewReader(want[:1000]), iotest.ErrReader(srcErr)))
	if err != srcErr || <-ended != "the host's source failed: writer aborted: gone" {
		t.Fatalf("failing source: %v", err)
	}

	go func() {
		f := readFrame(t, gr)
		e, _ := proto.Marshal(proto.TypeReply, f.ID, proto.Reply{Error: &proto.Error{Code: "S211", Message: "parent directory not found: /a/b"}})
		writeFrame(t, gc, e)
		for {
			if _, err := proto.Read(gr); err != nil {
				return
			}
		}
	}()
	var fe *vm.FSError
	if _, err := m.FSWrite(ctx, json.RawMessage(`{"path":"/a/b"}`), endless{}); !errors.As(err, &fe) || fe.Code != "S211" {
		t.Fatalf("refused write: %v", err)
	}
}

// endless is a source that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
