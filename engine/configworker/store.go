package configworker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/internal/base/privfile"
)

// MaxValueBytes caps the JSON of one entry's value (register, set, publish: ENTRY_TOO_LARGE); a
// stored file larger than MaxValueBytes plus maxEnvelope is skipped at start.
const (
	MaxValueBytes = 4 << 20
	maxEnvelope   = 64 << 10
)

// fileEntry is one entry as the fs adapter keeps it: <dir>/<id>.json, the value stored as the
// exact JSON it was given, so it reads back unchanged. The schema is not kept; its owner
// registers it again every boot. Entries of older versions, <dir>/<id>.yaml, are still read
// (and replaced by a .json file on the next write).
type fileEntry struct {
	ID          string          `json:"id"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Value       json.RawMessage `json:"value"`
	// Untrusted marks a value the engine stored for a caller holding neither the owner
	// credential nor a namespace token: its placeholders are never expanded. A file without it
	// (written by hand, or for a trusted caller) expands for trusted readers.
	Untrusted bool `json:"untrusted,omitempty"`
}

// fsStore persists entries as files in one directory.
type fsStore struct {
	dir string
	log *slog.Logger
}

// load reads every entry of the directory. An entry that cannot be read is logged and skipped,
// so one bad file never stops the engine from starting; a .json entry wins over a .yaml one of
// the same id.
func (s fsStore) load() (map[string]fileEntry, error) {
	out := map[string]fileEntry{}
	for _, ext := range []string{".yaml", ".json"} {
		files, err := filepath.Glob(filepath.Join(s.dir, "*"+ext))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			e, err := readEntry(f)
			if err != nil {
				s.log.Warn("configuration entry skipped", "file", f, "err", err)
				continue
			}
			if e.ID == "" {
				e.ID = strings.TrimSuffix(filepath.Base(f), ext)
			}
			if !idRE.MatchString(e.ID) {
				s.log.Warn("configuration entry skipped", "file", f, "err", fmt.Sprintf("invalid id %q", e.ID))
				continue
			}
			out[e.ID] = e
		}
	}
	return out, nil
}

func readEntry(f string) (fileEntry, error) {
	var e fileEntry
	st, err := os.Stat(f)
	if err != nil {
		return e, err
	}
	if !st.Mode().IsRegular() {
		return e, errors.New("not a regular file")
	}
	if st.Size() > MaxValueBytes+maxEnvelope {
		return e, fmt.Errorf("%d bytes, more than the %d an entry may hold", st.Size(), MaxValueBytes)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return e, err
	}
	if strings.HasSuffix(f, ".json") {
		if err := json.Unmarshal(b, &e); err != nil {
			return e, err
		}
		if len(e.Value) == 0 {
			e.Value = json.RawMessage("null")
		}
		return e, nil
	}
	return legacyEntry(b)
}

// legacyEntry reads an entry an older version wrote as YAML. It walks the node tree (linear
// time, where yaml.v3's Decode checks duplicate keys quadratically), takes every key literally
// ("<<" is a key, not a merge) and refuses anchors and aliases, which that writer never made.
func legacyEntry(b []byte) (fileEntry, error) {
	var e fileEntry
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return e, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return e, errors.New("not a mapping with id, name, description and value")
	}
	root := doc.Content[0]
	e.Value = json.RawMessage("null")
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		var err error
		switch k.Value {
		case "id":
			e.ID = v.Value
		case "name":
			e.Name = v.Value
		case "description":
			e.Description = v.Value
		case "value":
			var buf bytes.Buffer
			if err = nodeJSON(&buf, v, 0); err == nil {
				e.Value = buf.Bytes()
			}
		}
		if err != nil {
			return e, fmt.Errorf("%s: line %d: %w", k.Value, v.Line, err)
		}
	}
	return e, nil
}

// maxDepth bounds the nesting nodeJSON follows.
const maxDepth = 1000

// nodeJSON writes the JSON form of a YAML node.
func nodeJSON(buf *bytes.Buffer, n *yaml.Node, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested more than %d levels", maxDepth)
	}
	if n.Anchor != "" || n.Kind == yaml.AliasNode {
		return errors.New("anchors and aliases are not supported in stored entries")
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			buf.WriteString("null")
			return nil
		}
		return nodeJSON(buf, n.Content[0], depth+1)
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := nodeJSON(buf, c, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	case yaml.MappingNode:
		seen := make(map[string]bool, len(n.Content)/2)
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a key must be a scalar", k.Line)
			}
			if seen[k.Value] {
				return fmt.Errorf("line %d: key %q appears twice", k.Line, k.Value)
			}
			seen[k.Value] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(buf, k.Value)
			buf.WriteByte(':')
			if err := nodeJSON(buf, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
		return nil
	case yaml.ScalarNode:
		scalarJSON(buf, n)
		return nil
	}
	return fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

// scalarJSON writes a resolved YAML scalar as JSON: null, booleans and numbers by their tag,
// everything else as a string.
func scalarJSON(buf *bytes.Buffer, n *yaml.Node) {
	switch n.ShortTag() {
	case "!!null":
		buf.WriteString("null")
		return
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			buf.WriteString(strconv.FormatBool(b))
			return
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			buf.WriteString(strconv.FormatInt(i, 10))
			return
		}
		var u uint64
		if n.Decode(&u) == nil {
			buf.WriteString(strconv.FormatUint(u, 10))
			return
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil {
			if out, err := json.Marshal(f); err == nil {
				buf.Write(out)
				return
			}
		}
	}
	writeJSONString(buf, n.Value)
}

// writeJSONString writes s as a JSON string, leaving <, > and & as they are.
func writeJSONString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // Encode's newline
}

// save writes e as <id>.json (atomically: a mode-0600 temporary file renamed over it) in a
// directory of mode 0700, and removes an older <id>.yaml: a value may hold a secret (an API key
// set literally), which no other local user may read.
func (s fsStore) save(e fileEntry) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return err
	}
	if err := privfile.WriteAtomic(filepath.Join(s.dir, e.ID+".json"), buf.Bytes()); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.dir, e.ID+".yaml")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// tighten closes the directory (0700) and its entry files (0600) to other local users, for
// entries an older version wrote 0644 in a 0755 directory. Symlinks are left alone; a failure
// (a file of another user's) is logged and the file left as it is.
func (s fsStore) tighten() {
	st, err := os.Lstat(s.dir)
	if err != nil || !st.IsDir() {
		return // nothing stored yet; save creates it 0700
	}
	fix := func(path string, mode fs.FileMode) {
		if privfile.Check(path, mode.IsDir()) == nil {
			return // already the user's alone (always so where there are no Unix modes)
		}
		if err := os.Chmod(path, mode.Perm()); err != nil {
			s.log.Warn("cannot close a configuration entry to other local users", "path", path, "err", err)
		}
	}
	fix(s.dir, fs.ModeDir|0o700)
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, d := range entries {
		name := d.Name()
		if !d.Type().IsRegular() || !(strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".yaml")) {
			continue
		}
		fix(filepath.Join(s.dir, name), 0o600)
	}
}
