package fsops

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/iii-go/iii/engine/sandbox/scode"
)

// bodyLimit is the largest file whose text is also returned as body.
const bodyLimit = 1 << 20

type pathReq struct {
	Path string `json:"path"`
}

// decodePath decodes a request whose only field is a required path.
func decodePath(req json.RawMessage) (pathReq, *Error) {
	var r pathReq
	e := decode(req, &r, need("path", &r.Path))
	return r, e
}

func ls(req json.RawMessage) (any, *Error) {
	r, e := decodePath(req)
	if e != nil {
		return nil, e
	}
	fi, err := os.Stat(r.Path)
	if err != nil {
		return nil, fsErr(r.Path, err)
	}
	if !fi.IsDir() {
		return nil, &Error{Code: scode.S212, Message: "not a directory or wrong type: " + r.Path}
	}
	des, err := os.ReadDir(r.Path)
	if err != nil {
		return nil, fsErr(r.Path, err)
	}
	entries := make([]Entry, 0, len(des))
	for _, de := range des {
		fi, err := os.Lstat(filepath.Join(r.Path, de.Name()))
		if err != nil {
			continue
		}
		entries = append(entries, linkEntry(de.Name(), filepath.Join(r.Path, de.Name()), fi))
	}
	return map[string]any{"entries": entries}, nil
}

func stat(req json.RawMessage) (any, *Error) {
	r, e := decodePath(req)
	if e != nil {
		return nil, e
	}
	fi, err := os.Lstat(r.Path)
	if err != nil {
		return nil, fsErr(r.Path, err)
	}
	return linkEntry(filepath.Base(r.Path), r.Path, fi), nil
}

func mkdir(req json.RawMessage) (any, *Error) {
	var r mkdirReq
	if e := decode(req, &r, need("path", &r.Path)); e != nil {
		return nil, e
	}
	mode, e := parseMode(r.Mode, "0755")
	if e != nil {
		return nil, e
	}
	if fi, err := os.Stat(r.Path); err == nil {
		if fi.IsDir() && r.Parents {
			return map[string]any{"created": false}, nil
		}
		return nil, &Error{Code: scode.S213, Message: "already exists: " + r.Path}
	}
	if r.Parents {
		if err := os.MkdirAll(r.Path, mode.Perm()); err != nil {
			return nil, fsErr(r.Path, err)
		}
	} else if err := os.Mkdir(r.Path, mode.Perm()); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, parentMissing(r.Path)
		}
		return nil, fsErr(r.Path, err)
	}
	if err := chmodFull(r.Path, mode); err != nil {
		return nil, fsErr(r.Path, err)
	}
	return map[string]any{"created": true}, nil
}

func write(req json.RawMessage) (any, *Error) {
	var r writeReq
	if e := decode(req, &r, need("path", &r.Path)); e != nil {
		return nil, e
	}
	mode, e := parseMode(r.Mode, "0644")
	if e != nil {
		return nil, e
	}
	hasContent := r.hasContent()
	if hasContent == (r.ContentB64 != nil) {
		return nil, invalid("exactly one of `content` and `content_b64` is required")
	}
	var data []byte
	if hasContent {
		var s string
		if err := json.Unmarshal(r.Content, &s); err != nil {
			return nil, invalid("`content` must be a string here (stream channels are resolved by the adapter)")
		}
		data = []byte(s)
	} else {
		var err error
		if data, err = base64.StdEncoding.DecodeString(*r.ContentB64); err != nil {
			return nil, invalid("`content_b64` is not valid base64: %v", err)
		}
	}
	if e := prepareWrite(r); e != nil {
		return nil, e
	}
	if err := os.WriteFile(r.Path, data, mode.Perm()); err != nil {
		return nil, fsErr(r.Path, err)
	}
	if err := chmodFull(r.Path, mode); err != nil {
		return nil, fsErr(r.Path, err)
	}
	return map[string]any{"bytes_written": len(data), "path": r.Path}, nil
}

// prepareWrite checks that r.Path is not a directory and that its parent exists, creating it
// when r.Parents is set.
func prepareWrite(r writeReq) *Error {
	if fi, err := os.Stat(r.Path); err == nil && fi.IsDir() {
		return &Error{Code: scode.S212, Message: "not a directory or wrong type: " + r.Path}
	}
	dir := filepath.Dir(r.Path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if !r.Parents {
			return parentMissing(r.Path)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fsErr(dir, err)
		}
	}
	return nil
}

func rm(req json.RawMessage) (any, *Error) {
	var r rmReq
	if e := decode(req, &r, need("path", &r.Path)); e != nil {
		return nil, e
	}
	if filepath.Clean(r.Path) == "/" {
		return nil, &Error{Code: scode.S215, Message: "permission denied: refusing to remove /"}
	}
	fi, err := os.Lstat(r.Path)
	if err != nil {
		return nil, fsErr(r.Path, err)
	}
	if fi.IsDir() && r.Recursive {
		err = os.RemoveAll(r.Path)
	} else {
		err = os.Remove(r.Path)
	}
	if err != nil {
		return nil, fsErr(r.Path, err)
	}
	return map[string]any{"removed": true}, nil
}

func chmod(req json.RawMessage) (any, *Error) {
	var r chmodReq
	if e := decode(req, &r, need("path", &r.Path), need("mode", &r.Mode)); e != nil {
		return nil, e
	}
	mode, e := parseMode(r.Mode, "")
	if e != nil {
		return nil, e
	}
	if _, err := os.Lstat(r.Path); err != nil {
		return nil, fsErr(r.Path, err)
	}
	var updated uint64
	apply := func(p string) *Error {
		if err := chmodFull(p, mode); err != nil {
			return fsErr(p, err)
		}
		if r.UID != nil || r.GID != nil {
			uid, gid := -1, -1
			if r.UID != nil {
				uid = *r.UID
			}
			if r.GID != nil {
				gid = *r.GID
			}
			if err := os.Lchown(p, uid, gid); err != nil {
				return fsErr(p, err)
			}
		}
		updated++
		return nil
	}
	if !r.Recursive {
		if e := apply(r.Path); e != nil {
			return nil, e
		}
		return map[string]any{"updated": updated}, nil
	}
	var ferr *Error
	err := filepath.WalkDir(r.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			ferr = fsErr(p, err)
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if e := apply(p); e != nil {
			ferr = e
			return e
		}
		return nil
	})
	if ferr != nil {
		return nil, ferr
	}
	if err != nil {
		return nil, fsErr(r.Path, err)
	}
	return map[string]any{"updated": updated}, nil
}

func mv(req json.RawMessage) (any, *Error) {
	var r mvReq
	if e := decode(req, &r, need("src", &r.Src), need("dst", &r.Dst)); e != nil {
		return nil, e
	}
	sfi, err := os.Lstat(r.Src)
	if err != nil {
		return nil, fsErr(r.Src, err)
	}
	if dfi, err := os.Lstat(r.Dst); err == nil {
		if !r.Overwrite {
			return nil, &Error{Code: scode.S213, Message: "already exists: " + r.Dst}
		}
		if dfi.IsDir() != sfi.IsDir() {
			return nil, &Error{Code: scode.S212, Message: "not a directory or wrong type: " + r.Dst}
		}
	}
	if _, err := os.Stat(filepath.Dir(r.Dst)); errors.Is(err, fs.ErrNotExist) {
		return nil, &Error{Code: scode.S211, Message: "parent directory not found: " + r.Dst}
	}
	if err := os.Rename(r.Src, r.Dst); err != nil {
		return nil, fsErr(r.Dst, err)
	}
	return map[string]any{"moved": true}, nil
}

// walkFiles lists the regular files under root (root itself when it is a file), filtered by the
// include and exclude globs matched against each file's base name and its path below root.
func walkFiles(root string, recursive bool, include, exclude []string) ([]string, *Error) {
	for _, g := range append(append([]string(nil), include...), exclude...) {
		if _, err := filepath.Match(g, ""); err != nil {
			return nil, invalid("invalid glob %q: %v", g, err)
		}
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fsErr(root, err)
	}
	if !fi.IsDir() {
		return []string{root}, nil
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil
		}
		if d.IsDir() {
			if p != root && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if len(include) > 0 && !globAny(include, rel) {
			return nil
		}
		if globAny(exclude, rel) {
			return nil
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, fsErr(root, err)
	}
	sort.Strings(files)
	return files, nil
}

func globAny(globs []string, rel string) bool {
	base := filepath.Base(rel)
	for _, g := range globs {
		if ok, _ := filepath.Match(g, base); ok {
			return true
		}
		if ok, _ := filepath.Match(g, rel); ok {
			return true
		}
	}
	return false
}

// mkdirReq is the request of fs::mkdir.
type mkdirReq struct {
	Path    string `json:"path"`
	Mode    string `json:"mode"`
	Parents bool   `json:"parents"`
}

// writeReq is the request of fs::write.
type writeReq struct {
	Path       string          `json:"path"`
	Mode       string          `json:"mode"`
	Parents    bool            `json:"parents"`
	Content    json.RawMessage `json:"content"`
	ContentB64 *string         `json:"content_b64"`
}

// hasContent reports whether r carries `content` (null counts as absent).
func (r writeReq) hasContent() bool { return len(r.Content) > 0 && string(r.Content) != "null" }

// rmReq is the request of fs::rm.
type rmReq struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

// chmodReq is the request of fs::chmod.
type chmodReq struct {
	Path      string `json:"path"`
	Mode      string `json:"mode"`
	UID       *int   `json:"uid"`
	GID       *int   `json:"gid"`
	Recursive bool   `json:"recursive"`
}

// mvReq is the request of fs::mv.
type mvReq struct {
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	Overwrite bool   `json:"overwrite"`
}
