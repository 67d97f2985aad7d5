// Package fsops implements the ten fs::* operations of the sandbox contract against the local
// filesystem; the guest agent runs it inside the sandbox root. Requests and replies are the JSON
// bodies of the 0.25 in-engine daemon's fs::* functions without sandbox_id (req A4), except that
// write takes content as a string or content_b64 (stream channels are resolved by the adapter),
// and that read and a write of streamed bytes are OpenRead and WriteFrom (stream.go), whose bytes
// the agent moves in chunks.
package fsops

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/unixmode"
)

// Error is an operation failure with its S21x code.
type Error struct {
	Code    string
	Message string
	Fix     json.RawMessage
}

// Error renders the code and message.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Do runs operation op ("ls", "write", ...) with the JSON request body req.
func Do(op string, req json.RawMessage) (json.RawMessage, *Error) {
	h, ok := ops[op]
	if !ok {
		return nil, invalid("unknown fs operation: %s", op)
	}
	if len(req) == 0 {
		req = json.RawMessage("{}")
	}
	v, err := h(req)
	if err != nil {
		return nil, err
	}
	b, merr := json.Marshal(v)
	if merr != nil {
		return nil, &Error{Code: scode.S216, Message: "fs i/o error: " + merr.Error()}
	}
	return b, nil
}

var ops = map[string]func(json.RawMessage) (any, *Error){
	"ls": ls, "stat": stat, "mkdir": mkdir, "write": write,
	"rm": rm, "chmod": chmod, "mv": mv, "grep": grep, "sed": sed,
}

func invalid(format string, a ...any) *Error {
	return &Error{Code: scode.S210, Message: fmt.Sprintf(format, a...)}
}

// field names a string field of a request that must not be empty.
type field struct {
	name  string
	value *string
}

// need requires the decoded string at value, reported as name when empty.
func need(name string, value *string) field { return field{name, value} }

// decode unmarshals req into v, then checks the needed fields in order (S210 on either failure).
func decode(req json.RawMessage, v any, needed ...field) *Error {
	if err := json.Unmarshal(req, v); err != nil {
		return invalid("invalid fs request: %v", err)
	}
	for _, f := range needed {
		if e := required(f.name, *f.value); e != nil {
			return e
		}
	}
	return nil
}

func required(name, v string) *Error {
	if v == "" {
		return invalid("missing field `%s`", name)
	}
	return nil
}

// fsErr maps an OS error on path to its S21x code.
func fsErr(path string, err error) *Error {
	var errno syscall.Errno
	errors.As(err, &errno)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &Error{Code: scode.S211, Message: "file not found: " + path}
	case errno == syscall.ENOTDIR || errno == syscall.EISDIR:
		return &Error{Code: scode.S212, Message: "not a directory or wrong type: " + path}
	case errno == syscall.ENOTEMPTY:
		return &Error{Code: scode.S214, Message: "directory not empty: " + path}
	case errors.Is(err, fs.ErrExist):
		return &Error{Code: scode.S213, Message: "already exists: " + path}
	case errors.Is(err, fs.ErrPermission) || errno == syscall.EROFS:
		return &Error{Code: scode.S215, Message: "permission denied: " + err.Error()}
	}
	return &Error{Code: scode.S216, Message: "fs i/o error: " + err.Error()}
}

func parentMissing(path string) *Error {
	return &Error{Code: scode.S211, Message: "parent directory not found: " + path, Fix: json.RawMessage(`{"parents":true}`)}
}

// parseMode reads an octal mode string such as "0644" or "755".
func parseMode(s, def string) (fs.FileMode, *Error) {
	if s == "" {
		s = def
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, invalid("invalid mode %q: want an octal string such as \"0644\"", s)
	}
	return unixmode.FileMode(uint32(n)), nil
}

// modeString renders the permission bits as "0644".
func modeString(m fs.FileMode) string {
	return fmt.Sprintf("%04o", unixmode.Bits(m))
}

// Entry is the FsEntry of the contract.
type Entry struct {
	Name      string `json:"name"`
	IsDir     bool   `json:"is_dir"`
	Size      int64  `json:"size"`
	Mode      string `json:"mode"`
	Mtime     int64  `json:"mtime"`
	IsSymlink bool   `json:"is_symlink"`
}

func entryOf(name string, fi fs.FileInfo) Entry {
	return Entry{Name: name, IsDir: fi.IsDir(), Size: fi.Size(), Mode: modeString(fi.Mode()), Mtime: fi.ModTime().Unix(), IsSymlink: fi.Mode()&fs.ModeSymlink != 0}
}

// linkEntry is entryOf for an lstat result at path; a symlink reports is_dir of its target.
func linkEntry(name, path string, fi fs.FileInfo) Entry {
	e := entryOf(name, fi)
	if e.IsSymlink {
		if t, err := os.Stat(path); err == nil {
			e.IsDir = t.IsDir()
		}
	}
	return e
}

// chmodFull applies permission and special bits (os.Chmod handles setuid/setgid/sticky).
func chmodFull(path string, m fs.FileMode) error { return os.Chmod(path, m) }

func unixTime(t time.Time) int64 { return t.Unix() }
