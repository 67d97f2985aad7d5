package fsops

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/internal/jsonfields"
)

func sorted(s ...string) []string { sort.Strings(s); return s }

// diff says how got differs from the 0.25 list want, "" when it does not.
func diff(want, got []string) string {
	if strings.Join(want, ",") == strings.Join(got, ",") {
		return ""
	}
	return "0.25: " + strings.Join(want, ", ") + "\nnow:  " + strings.Join(got, ", ")
}

// The fs::* request and reply fields of the 0.25 in-engine daemon,
// sandbox_id aside (the adapter consumes it): no field was renamed, dropped or added (req A4).
func TestFSFieldsMatchTheReference(t *testing.T) {
	requests := map[string]struct {
		typ  reflect.Type
		want []string
	}{
		"ls, stat, read": {reflect.TypeOf(pathReq{}), sorted("path")},
		"mkdir":          {reflect.TypeOf(mkdirReq{}), sorted("path", "mode", "parents")},
		"write":          {reflect.TypeOf(writeReq{}), sorted("path", "mode", "parents", "content", "content_b64")},
		"rm":             {reflect.TypeOf(rmReq{}), sorted("path", "recursive")},
		"chmod":          {reflect.TypeOf(chmodReq{}), sorted("path", "mode", "uid", "gid", "recursive")},
		"mv":             {reflect.TypeOf(mvReq{}), sorted("src", "dst", "overwrite")},
		"grep": {reflect.TypeOf(grepReq{}), sorted("path", "pattern", "recursive", "ignore_case", "include_glob", "exclude_glob",
			"max_matches", "max_line_bytes")},
		"sed": {reflect.TypeOf(sedReq{}), sorted("files", "path", "recursive", "include_glob", "exclude_glob", "pattern",
			"replacement", "regex", "first_only", "ignore_case")},
		"FsEntry":         {reflect.TypeOf(Entry{}), sorted("name", "is_dir", "size", "mode", "mtime", "is_symlink")},
		"FsMatch":         {reflect.TypeOf(Match{}), sorted("path", "line", "content")},
		"FsSedFileResult": {reflect.TypeOf(SedResult{}), sorted("path", "replacements", "success", "error")},
	}
	for name, r := range requests {
		if d := diff(r.want, jsonfields.Of(r.typ)); d != "" {
			t.Errorf("%s fields differ from the 0.25 list \n%s", name, d)
		}
	}

	dir := t.TempDir()
	f := filepath.Join(dir, "f.txt")
	replies := []struct {
		op   string
		req  map[string]any
		want []string
	}{
		{"mkdir", map[string]any{"path": filepath.Join(dir, "d"), "mode": "0755", "parents": true}, sorted("created")},
		{"write", map[string]any{"path": f, "mode": "0644", "parents": false, "content": "hello\n"}, sorted("bytes_written", "path")},
		{"ls", map[string]any{"path": dir}, sorted("entries")},
		{"stat", map[string]any{"path": f}, sorted("name", "is_dir", "size", "mode", "mtime", "is_symlink")},
		{"chmod", map[string]any{"path": f, "mode": "0600", "recursive": false}, sorted("updated")},
		{"grep", map[string]any{"path": dir, "pattern": "hel+o", "recursive": true}, sorted("matches", "truncated")},
		{"sed", map[string]any{"path": f, "pattern": "hello", "replacement": "bye"}, sorted("results", "total_replacements")},
		{"mv", map[string]any{"src": f, "dst": filepath.Join(dir, "g.txt"), "overwrite": false}, sorted("moved")},
		{"rm", map[string]any{"path": filepath.Join(dir, "d"), "recursive": true}, sorted("removed")},
	}
	for _, r := range replies {
		b, _ := json.Marshal(r.req)
		out, e := Do(r.op, b)
		if e != nil {
			t.Fatalf("fs::%s %v: %v", r.op, r.req, e)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		var got []string
		for k := range m {
			got = append(got, k)
		}
		sort.Strings(got)
		if d := diff(r.want, got); d != "" {
			t.Errorf("fs::%s reply fields differ from the 0.25 list \n%s", r.op, d)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "g.txt")); err != nil {
		t.Fatal("fs::mv did not move the file")
	}
}
