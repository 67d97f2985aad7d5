package fsops

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"

	"github.com/iii-go/iii/engine/sandbox/scode"
)

// Reader is an open fs::read: Head is the reply without content ({size, mode, mtime, body?}) and
// Read yields the file's bytes.
type Reader struct {
	Head json.RawMessage
	r    io.Reader
	f    *os.File
}

// Read reads the file.
func (r *Reader) Read(p []byte) (int, error) { return r.r.Read(p) }

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }

// OpenRead opens fs::read of req. Only a file of at most 1 MiB is read ahead, to decide whether
// its text is also the body; a larger one is read as it is streamed.
func OpenRead(req json.RawMessage) (*Reader, *Error) {
	r, e := decodePath(req)
	if e != nil {
		return nil, e
	}
	f, err := os.Open(r.Path)
	if err != nil {
		return nil, fsErr(r.Path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fsErr(r.Path, err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, &Error{Code: scode.S212, Message: "not a directory or wrong type: " + r.Path}
	}
	head := map[string]any{"size": fi.Size(), "mode": modeString(fi.Mode()), "mtime": unixTime(fi.ModTime())}
	var src io.Reader = f
	if fi.Size() <= bodyLimit {
		data, err := io.ReadAll(io.LimitReader(f, bodyLimit+1))
		if err != nil {
			f.Close()
			return nil, fsErr(r.Path, err)
		}
		if len(data) <= bodyLimit {
			head["size"] = len(data)
			if utf8.Valid(data) {
				head["body"] = string(data)
			}
			src = bytes.NewReader(data)
		} else {
			// The file grew past the limit since its stat: stream all of it, no body.
			head["size"] = max(fi.Size(), int64(len(data)))
			src = io.MultiReader(bytes.NewReader(data), f)
		}
	}
	b, merr := json.Marshal(head)
	if merr != nil {
		f.Close()
		return nil, &Error{Code: scode.S216, Message: "fs i/o error: " + merr.Error()}
	}
	return &Reader{Head: b, r: src, f: f}, nil
}

// copyBuffer is the size of WriteFrom's writes (a stream chunk: few system calls).
const copyBuffer = 256 << 10

// SourceError is WriteFrom's failure to read its source; the file was not written.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return e.Err.Error() }

// WriteFrom runs fs::write of req, which carries no content, with the file's bytes read from
// src; a ChunkSource writes them itself, sparing a copy. The bytes go to a temporary file
// beside the target that replaces it once src ends, so a source that fails midway (returned
// as a *Error whose message is the SourceError's) leaves the target as it was. As with an
// inline write, a symlink is written through and an existing file keeps its owner.
func WriteFrom(req json.RawMessage, src io.Reader) (json.RawMessage, *Error) {
	var r writeReq
	if e := decode(req, &r, need("path", &r.Path)); e != nil {
		return nil, e
	}
	if r.hasContent() || r.ContentB64 != nil {
		return nil, invalid("a streamed write carries no `content` or `content_b64`")
	}
	mode, e := parseMode(r.Mode, "0644")
	if e != nil {
		return nil, e
	}
	if e := prepareWrite(r); e != nil {
		return nil, e
	}
	target := r.Path
	if p, err := filepath.EvalSymlinks(r.Path); err == nil {
		target = p
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(target), ".iii-write-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return nil, fsErr(r.Path, err)
	}
	var n int64
	if cs, ok := src.(ChunkSource); ok {
		n, err = cs.WriteChunksTo(f)
	} else {
		n, err = io.CopyBuffer(struct{ io.Writer }{f}, sourceOnly{src}, make([]byte, copyBuffer))
	}
	if err == nil {
		err = keepOwner(f, target)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		err = chmodFull(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, target)
	}
	if err != nil {
		os.Remove(tmp)
		if se := (*SourceError)(nil); errors.As(err, &se) {
			return nil, &Error{Code: scode.S218, Message: "fs channel aborted: " + se.Error()}
		}
		return nil, fsErr(r.Path, err)
	}
	b, _ := json.Marshal(map[string]any{"bytes_written": n, "path": r.Path})
	return b, nil
}

// keepOwner gives f the owner and group of the file at target, when there is one.
func keepOwner(f *os.File, target string) error {
	fi, err := os.Stat(target)
	if err != nil {
		return nil // a new file: the writer owns it, as with an inline write
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || (int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid()) {
		return nil
	}
	return f.Chown(int(st.Uid), int(st.Gid))
}

// ChunkSource is a source that writes its bytes to w itself, reporting its own failures as
// *SourceError and those of w as they are.
type ChunkSource interface {
	WriteChunksTo(w io.Writer) (int64, error)
}

// sourceOnly marks the errors of its reader as SourceErrors (and hides any WriterTo).
type sourceOnly struct{ r io.Reader }

func (s sourceOnly) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = &SourceError{Err: err}
	}
	return n, err
}
