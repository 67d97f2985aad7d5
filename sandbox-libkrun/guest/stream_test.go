//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// agentPair serves an agent on one end of a socket pair; the test plays the host on the other.
func agentPair(t *testing.T) (*os.File, *bufio.Reader) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	guest, host := os.NewFile(uintptr(fds[0]), "guest"), os.NewFile(uintptr(fds[1]), "host")
	a := &agent{port: guest, execs: map[uint32]*running{}, streams: map[uint32]*proto.Stream{}, children: map[int]bool{}, procs: newProcTable()}
	done := make(chan struct{})
	go func() { _ = a.serve(); close(done) }()
	t.Cleanup(func() { host.Close(); <-done; guest.Close() })
	r := bufio.NewReader(host)
	if f, err := proto.Read(r); err != nil || f.Type != proto.TypeHello {
		t.Fatalf("hello: %v %v", f.Type, err)
	}
	return host, r
}

func send(t *testing.T, w *os.File, f proto.Frame) {
	t.Helper()
	if err := proto.Write(w, f); err != nil {
		t.Fatal(err)
	}
}

func sendFS(t *testing.T, w *os.File, id uint32, op string, req map[string]any, stream bool) {
	t.Helper()
	b, _ := json.Marshal(req)
	f, _ := proto.Marshal(proto.TypeFS, id, proto.FS{Op: op, Request: b, Stream: stream})
	send(t, w, f)
}

// next reads frames of id, dropping credits unless want is TypeCredit.
func next(t *testing.T, r *bufio.Reader, id uint32) proto.Frame {
	t.Helper()
	for {
		f, err := proto.Read(r)
		if err != nil {
			t.Fatal(err)
		}
		if f.ID == id && f.Type != proto.TypeCredit {
			return f
		}
	}
}

func replyOf(t *testing.T, f proto.Frame) proto.Reply {
	t.Helper()
	var r proto.Reply
	if f.Type != proto.TypeReply || json.Unmarshal(f.Payload, &r) != nil {
		t.Fatalf("want a reply, got %v %s", f.Type, f.Payload)
	}
	return r
}

// TestAgentStreams: the agent writes a streamed file, reads it back under the host's credit,
// keeps the old file when the host aborts a write, and stops a read the host ends early.
func TestAgentStreams(t *testing.T) {
	host, r := agentPair(t)
	path := filepath.Join(t.TempDir(), "d", "f.bin")
	want := bytes.Repeat([]byte("abcdefgh"), (3*proto.StreamChunk+100)/8)

	sendFS(t, host, 1, "write", map[string]any{"path": path, "parents": true}, true)
	for rest := want; len(rest) > 0; {
		n := min(len(rest), proto.StreamChunk)
		send(t, host, proto.Frame{Type: proto.TypeData, ID: 1, Payload: rest[:n]})
		rest = rest[n:]
	}
	send(t, host, proto.EndFrame(1, ""))
	if rep := replyOf(t, next(t, r, 1)); rep.Error != nil || !strings.Contains(string(rep.Result), `"bytes_written":`+itoa(len(want))) {
		t.Fatalf("write reply %+v %s", rep.Error, rep.Result)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Fatal("the streamed write wrote other bytes")
	}

	sendFS(t, host, 2, "read", map[string]any{"path": path}, true)
	if rep := replyOf(t, next(t, r, 2)); rep.Error != nil || !strings.Contains(string(rep.Result), `"size":`+itoa(len(want))) {
		t.Fatalf("read head %+v %s", rep.Error, rep.Result)
	}
	var got []byte
	for {
		f := next(t, r, 2)
		if f.Type == proto.TypeEnd {
			if len(f.Payload) != 0 {
				t.Fatalf("read aborted: %s", f.Payload)
			}
			break
		}
		got = append(got, f.Payload...)
		send(t, host, proto.CreditFrame(2, len(f.Payload)))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, want %d", len(got), len(want))
	}

	sendFS(t, host, 3, "write", map[string]any{"path": path}, true)
	send(t, host, proto.Frame{Type: proto.TypeData, ID: 3, Payload: []byte("partial")})
	send(t, host, proto.EndFrame(3, "writer aborted: gone"))
	if rep := replyOf(t, next(t, r, 3)); rep.Error == nil || rep.Error.Code != "S218" || rep.Error.Message != "fs channel aborted: writer aborted: gone" {
		t.Fatalf("aborted write reply %+v", rep.Error)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Fatal("an aborted write changed the file")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("left beside the file: %v", ents)
	}

	// A file larger than the window: without credit the agent stops at the window; an End stops it.
	big := filepath.Join(filepath.Dir(path), "big")
	if err := os.WriteFile(big, make([]byte, 2*proto.StreamWindow), 0o644); err != nil {
		t.Fatal(err)
	}
	sendFS(t, host, 4, "read", map[string]any{"path": big}, true)
	replyOf(t, next(t, r, 4))
	for sent := 0; sent < proto.StreamWindow; {
		f := next(t, r, 4)
		if f.Type != proto.TypeData {
			t.Fatalf("got %v within the window", f.Type)
		}
		sent += len(f.Payload)
	}
	send(t, host, proto.EndFrame(4, "closed by the host"))
	sendFS(t, host, 5, "stat", map[string]any{"path": big}, false)
	if rep := replyOf(t, next(t, r, 5)); rep.Error != nil {
		t.Fatalf("stat after an ended read: %+v", rep.Error)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
