package fsops

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
)

func call(t *testing.T, op string, req map[string]any) (map[string]any, *Error) {
	t.Helper()
	b, _ := json.Marshal(req)
	out, e := Do(op, b)
	if e != nil {
		return nil, e
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m, nil
}

func must(t *testing.T, op string, req map[string]any) map[string]any {
	t.Helper()
	m, e := call(t, op, req)
	if e != nil {
		t.Fatalf("%s %v: %v", op, req, e)
	}
	return m
}

func wantCode(t *testing.T, op string, req map[string]any, code string) *Error {
	t.Helper()
	_, e := call(t, op, req)
	if e == nil || e.Code != code {
		t.Fatalf("%s %v: got %v, want %s", op, req, e, code)
	}
	return e
}

func TestWriteReadStat(t *testing.T) {
	d := t.TempDir()
	f := filepath.Join(d, "a", "b.txt")
	e := wantCode(t, "write", map[string]any{"path": f, "content": "x"}, "S211")
	if string(e.Fix) != `{"parents":true}` || !strings.HasPrefix(e.Message, "parent directory not found: ") {
		t.Fatalf("missing parent: %+v", e)
	}
	r := must(t, "write", map[string]any{"path": f, "content": "héllo\n", "parents": true, "mode": "0600"})
	if r["bytes_written"] != float64(7) || r["path"] != f {
		t.Fatalf("write: %v", r)
	}
	wantCode(t, "write", map[string]any{"path": f}, "S210")
	wantCode(t, "write", map[string]any{"path": f, "content": "a", "content_b64": "YQ=="}, "S210")
	wantCode(t, "write", map[string]any{"path": f, "content": "a", "mode": "9"}, "S210")
	r, data := readAll(t, f)
	if r["body"] != "héllo\n" || string(data) != "héllo\n" || r["mode"] != "0600" || r["size"] != float64(7) {
		t.Fatalf("read: %v %q", r, data)
	}
	must(t, "write", map[string]any{"path": filepath.Join(d, "bin"), "content_b64": "AP8="})
	if r, data = readAll(t, filepath.Join(d, "bin")); r["body"] != nil || string(data) != "\x00\xff" {
		t.Fatalf("binary file has a body: %v", r)
	}
	for path, code := range map[string]string{filepath.Join(d, "nope"): "S211", d: "S212"} {
		b, _ := json.Marshal(map[string]any{"path": path})
		if _, e := OpenRead(b); e == nil || e.Code != code {
			t.Fatalf("read %s: %v, want %s", path, e, code)
		}
	}
	r = must(t, "stat", map[string]any{"path": f})
	if r["name"] != "b.txt" || r["is_dir"] != false || r["size"] != float64(7) {
		t.Fatalf("stat: %v", r)
	}
	r = must(t, "ls", map[string]any{"path": filepath.Join(d, "a")})
	if ents := r["entries"].([]any); len(ents) != 1 || ents[0].(map[string]any)["name"] != "b.txt" {
		t.Fatalf("ls: %v", r)
	}
	wantCode(t, "ls", map[string]any{"path": f}, "S212")
	wantCode(t, "ls", map[string]any{}, "S210")
}

func TestMkdirRmMvChmod(t *testing.T) {
	d := t.TempDir()
	p := filepath.Join(d, "x", "y")
	wantCode(t, "mkdir", map[string]any{"path": p}, "S211")
	if r := must(t, "mkdir", map[string]any{"path": p, "parents": true}); r["created"] != true {
		t.Fatalf("mkdir: %v", r)
	}
	if r := must(t, "mkdir", map[string]any{"path": p, "parents": true}); r["created"] != false {
		t.Fatalf("mkdir again: %v", r)
	}
	wantCode(t, "mkdir", map[string]any{"path": p}, "S213")
	must(t, "write", map[string]any{"path": filepath.Join(p, "f"), "content": "1"})
	wantCode(t, "rm", map[string]any{"path": filepath.Join(d, "x")}, "S214")
	must(t, "write", map[string]any{"path": filepath.Join(d, "g"), "content": "2"})
	wantCode(t, "mv", map[string]any{"src": filepath.Join(d, "g"), "dst": filepath.Join(p, "f")}, "S213")
	if r := must(t, "mv", map[string]any{"src": filepath.Join(d, "g"), "dst": filepath.Join(p, "f"), "overwrite": true}); r["moved"] != true {
		t.Fatalf("mv: %v", r)
	}
	wantCode(t, "mv", map[string]any{"src": filepath.Join(d, "g"), "dst": filepath.Join(d, "h")}, "S211")
	if r := must(t, "chmod", map[string]any{"path": filepath.Join(d, "x"), "mode": "0700", "recursive": true}); r["updated"] != float64(3) {
		t.Fatalf("chmod: %v", r)
	}
	if fi, _ := os.Stat(filepath.Join(p, "f")); fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v", fi.Mode())
	}
	wantCode(t, "chmod", map[string]any{"path": p}, "S210")
	if r := must(t, "rm", map[string]any{"path": filepath.Join(d, "x"), "recursive": true}); r["removed"] != true {
		t.Fatalf("rm: %v", r)
	}
	wantCode(t, "rm", map[string]any{"path": filepath.Join(d, "x")}, "S211")
}

func TestGrepSed(t *testing.T) {
	d := t.TempDir()
	must(t, "write", map[string]any{"path": filepath.Join(d, "a.py"), "content": "import os\nprint('Hello')\nhello = 1\n"})
	must(t, "write", map[string]any{"path": filepath.Join(d, "sub", "b.txt"), "content": "hello world " + strings.Repeat("x", 100) + "\n", "parents": true})
	r := must(t, "grep", map[string]any{"path": d, "pattern": "hello", "ignore_case": true, "max_line_bytes": 20})
	ms := r["matches"].([]any)
	if len(ms) != 3 || r["truncated"] != false {
		t.Fatalf("grep: %v", r)
	}
	last := ms[2].(map[string]any)
	if last["line"] != float64(1) || !strings.HasSuffix(last["content"].(string), "…") {
		t.Fatalf("grep clip: %v", last)
	}
	r = must(t, "grep", map[string]any{"path": d, "pattern": "hello", "include_glob": []string{"*.py"}, "max_matches": 0})
	if r["truncated"] != true {
		t.Fatalf("grep cap: %v", r)
	}
	r = must(t, "grep", map[string]any{"path": d, "pattern": "hello", "recursive": false})
	if len(r["matches"].([]any)) != 1 {
		t.Fatalf("grep non-recursive: %v", r)
	}
	wantCode(t, "grep", map[string]any{"path": d, "pattern": "("}, "S217")
	r = must(t, "sed", map[string]any{"path": d, "pattern": `(h)ello`, "replacement": "${1}i", "exclude_glob": []string{"*.txt"}})
	if r["total_replacements"] != float64(1) {
		t.Fatalf("sed: %v", r)
	}
	b, _ := os.ReadFile(filepath.Join(d, "a.py"))
	if string(b) != "import os\nprint('Hello')\nhi = 1\n" {
		t.Fatalf("sed result %q", b)
	}
	r = must(t, "sed", map[string]any{"files": []string{filepath.Join(d, "a.py")}, "pattern": "o", "replacement": "$0", "regex": false, "first_only": true})
	b, _ = os.ReadFile(filepath.Join(d, "a.py"))
	if r["total_replacements"] != float64(1) || string(b) != "imp$0rt os\nprint('Hello')\nhi = 1\n" {
		t.Fatalf("literal sed: %v %q", r, b)
	}
	wantCode(t, "sed", map[string]any{"files": []string{"x"}, "path": d, "pattern": "a", "replacement": ""}, "S210")
	wantCode(t, "sed", map[string]any{"pattern": "a", "replacement": ""}, "S210")
	r = must(t, "sed", map[string]any{"files": []string{filepath.Join(d, "missing")}, "pattern": "a", "replacement": ""})
	res := r["results"].([]any)[0].(map[string]any)
	if res["success"] != false || !strings.HasPrefix(res["error"].(string), "file not found") {
		t.Fatalf("sed missing file: %v", r)
	}
}

// readAll runs OpenRead of path and reads the stream to its end.
func readAll(t *testing.T, path string) (map[string]any, []byte) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"path": path})
	rd, e := OpenRead(b)
	if e != nil {
		t.Fatalf("read %s: %v", path, e)
	}
	defer rd.Close()
	var head map[string]any
	if err := json.Unmarshal(rd.Head, &head); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return head, data
}

// TestStreams: a large file streams without a body and with its whole size; WriteFrom writes
// its source, and a source that fails midway leaves the old file and no temporary behind.
func TestStreams(t *testing.T) {
	d := t.TempDir()
	f := filepath.Join(d, "big")
	want := bytes.Repeat([]byte("0123456789abcdef"), (3<<20)/16+5)
	req, _ := json.Marshal(map[string]any{"path": f, "mode": "0600"})
	out, e := WriteFrom(req, bytes.NewReader(want))
	if e != nil || string(out) != `{"bytes_written":`+strconv.Itoa(len(want))+`,"path":"`+f+`"}` {
		t.Fatalf("WriteFrom: %s %v", out, e)
	}
	head, got := readAll(t, f)
	if !bytes.Equal(got, want) || head["size"] != float64(len(want)) || head["body"] != nil || head["mode"] != "0600" {
		t.Fatalf("read back %d bytes, head %v", len(got), head)
	}
	_, e = WriteFrom(req, io.MultiReader(strings.NewReader("partial"), iotest.ErrReader(errors.New("writer aborted: gone"))))
	if e == nil || e.Code != "S218" || e.Message != "fs channel aborted: writer aborted: gone" {
		t.Fatalf("failing source: %v", e)
	}
	if _, got = readAll(t, f); !bytes.Equal(got, want) {
		t.Fatal("a failed streamed write changed the file")
	}
	if ents, _ := os.ReadDir(d); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	withContent, _ := json.Marshal(map[string]any{"path": f, "content": "x"})
	if _, e = WriteFrom(withContent, strings.NewReader("")); e == nil || e.Code != "S210" {
		t.Fatalf("streamed write with content: %v", e)
	}
	noParent, _ := json.Marshal(map[string]any{"path": filepath.Join(d, "x", "y")})
	if _, e = WriteFrom(noParent, strings.NewReader("")); e == nil || e.Code != "S211" {
		t.Fatalf("streamed write without parent: %v", e)
	}
}

// TestWriteFromLikeInline: a streamed write goes through a symlink to its target, as an inline
// write does, and (when run as root) an existing file keeps its owner.
func TestWriteFromLikeInline(t *testing.T) {
	d := t.TempDir()
	target := filepath.Join(d, "target")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	owned := os.Geteuid() == 0
	if owned {
		if err := os.Chown(target, 1234, 5678); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("not root: the owner is not checked")
	}
	link := filepath.Join(d, "link")
	if err := os.Symlink("target", link); err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"path": link})
	if out, e := WriteFrom(req, strings.NewReader("new")); e != nil {
		t.Fatalf("WriteFrom: %s %v", out, e)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink was replaced: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Fatalf("target holds %q", b)
	}
	if owned {
		fi, _ := os.Stat(target)
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1234 || st.Gid != 5678 {
			t.Fatalf("owner %d:%d, want 1234:5678", st.Uid, st.Gid)
		}
	}
}
