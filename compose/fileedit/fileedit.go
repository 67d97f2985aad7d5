// Package fileedit edits a worker-compose.yaml in place through the yaml.v3 Node API: adding a
// container, rewriting a version range, removing a container and its references. Comments, key
// order and every unrelated key survive; writes are atomic (a temporary file in the same
// directory renamed over the original) and keep the file's mode.
package fileedit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/state"
	"gopkg.in/yaml.v3"
)

// Doc is a compose file held as a YAML node tree.
type Doc struct {
	Path string
	// Orig is the content as read; Mode the file's permission bits.
	Orig []byte
	Mode fs.FileMode
	doc  *yaml.Node
	// text is the current content when it is a splice of Orig; nil means render doc.
	text []byte
}

// Load reads the compose file at path.
func Load(path string) (*Doc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errcode.New(errcode.IOError, "cannot read %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, errcode.New(errcode.IOError, "cannot read %s: %w", path, err)
	}
	d, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	d.Mode = st.Mode().Perm()
	return d, nil
}

// Parse holds data as the compose file at path (mode 0644 unless loaded from disk).
func Parse(path string, data []byte) (*Doc, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, &errcode.Error{Code: errcode.InvalidComposeFile, Message: fmt.Sprintf("%s is not valid compose YAML: %s", path, strings.TrimPrefix(err.Error(), "yaml: ")), Err: err}
	}
	if doc.Kind == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errcode.New(errcode.InvalidComposeFile, "%s is not valid compose YAML: the top level must be a mapping", path)
	}
	return &Doc{Path: path, Orig: data, Mode: 0o644, doc: &doc, text: data}, nil
}

// Container is a container entry to add.
type Container struct {
	Worker  string
	Version string
	// Comment, when set, is written above the container's key (without the leading "# ").
	Comment string
}

func str(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }

// get returns the value of key in mapping m and its index in Content, or nil, -1.
func get(m *yaml.Node, key string) (*yaml.Node, int) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, -1
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1], i
		}
	}
	return nil, -1
}

// containers returns the containers mapping of root, creating it (block style) when create is
// set.
func containers(root *yaml.Node, create bool) *yaml.Node {
	v, i := get(root, "containers")
	if v == nil {
		if !create {
			return nil
		}
		v = &yaml.Node{Kind: yaml.MappingNode}
		root.Content = append(root.Content, str("containers"), v)
		return v
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" && create {
		nv := &yaml.Node{Kind: yaml.MappingNode, HeadComment: v.HeadComment, LineComment: v.LineComment, FootComment: v.FootComment}
		root.Content[i+1] = nv
		return nv
	}
	return v
}

func containerBody(c Container) *yaml.Node {
	body := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{str("worker"), str(c.Worker)}}
	if c.Version != "" {
		body.Content = append(body.Content, str("version"), versionNode(c.Version))
	}
	return body
}

// AddContainer appends a container at the end of containers: (created when absent).
func (d *Doc) AddContainer(key string, c Container) error {
	edit := func(root *yaml.Node) error {
		ctrs := containers(root, true)
		if ctrs.Kind != yaml.MappingNode {
			return errcode.New(errcode.InvalidComposeFile, "%s is not valid compose YAML: containers must be a mapping", d.Path)
		}
		if v, _ := get(ctrs, key); v != nil {
			return errcode.New(errcode.InvalidWorkerSpec, "%s already declares container '%s'", d.Path, key)
		}
		if len(ctrs.Content) == 0 {
			ctrs.Style = 0
		}
		k := str(key)
		if c.Comment != "" {
			k.HeadComment = "# " + c.Comment
		}
		ctrs.Content = append(ctrs.Content, k, containerBody(c))
		return nil
	}
	return d.apply(edit, spliceAdd(key, containerBody(c), c.Comment))
}

func versionNode(v string) *yaml.Node {
	n := str(v)
	n.Style = yaml.SingleQuotedStyle
	return n
}

// SetVersion rewrites containers.<key>.version, keeping its comments.
func (d *Doc) SetVersion(key, version string) error {
	edit := func(root *yaml.Node) error {
		c, _ := get(containers(root, false), key)
		if c == nil || c.Kind != yaml.MappingNode {
			return errcode.New(errcode.UnknownContainer, "%s has no container '%s'", d.Path, key)
		}
		v, _ := get(c, "version")
		if v == nil {
			return errcode.New(errcode.NotAPackageContainer, "%s: container '%s' has no version (only package:// containers do)", d.Path, key)
		}
		v.Kind, v.Tag, v.Value, v.Style = yaml.ScalarNode, "!!str", version, yaml.SingleQuotedStyle
		return nil
	}
	return d.apply(edit, spliceScalar(key, "version", version))
}

// RemoveContainer deletes containers.<key> and removes key from every start_after/depends_on;
// a list left empty is removed with its key.
func (d *Doc) RemoveContainer(key string) error {
	return d.apply(func(root *yaml.Node) error {
		ctrs := containers(root, false)
		_, i := get(ctrs, key)
		if i < 0 {
			return errcode.New(errcode.UnknownContainer, "%s has no container '%s'", d.Path, key)
		}
		ctrs.Content = append(ctrs.Content[:i:i], ctrs.Content[i+2:]...)
		for j := 1; j < len(ctrs.Content); j += 2 {
			c := ctrs.Content[j]
			for _, field := range []string{"start_after", "depends_on"} {
				list, li := get(c, field)
				if list == nil || list.Kind != yaml.SequenceNode {
					continue
				}
				kept := list.Content[:0]
				for _, item := range list.Content {
					if item.Value != key {
						kept = append(kept, item)
					}
				}
				list.Content = kept
				if len(kept) == 0 {
					c.Content = append(c.Content[:li:li], c.Content[li+2:]...)
				}
			}
		}
		return nil
	}, nil)
}

// Bytes renders the edited file: the original bytes with the edits spliced in when that yields
// the same tree, else the whole tree rendered with two-space indentation.
func (d *Doc) Bytes() ([]byte, error) {
	if d.text != nil {
		return d.text, nil
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(d.doc); err != nil {
		return nil, errcode.New(errcode.IOError, "cannot render %s: %w", d.Path, err)
	}
	if err := enc.Close(); err != nil {
		return nil, errcode.New(errcode.IOError, "cannot render %s: %w", d.Path, err)
	}
	return b.Bytes(), nil
}

// Write saves the edited file atomically with its original mode. It returns the bytes written.
func (d *Doc) Write() ([]byte, error) {
	data, err := d.Bytes()
	if err != nil {
		return nil, err
	}
	if err := WriteFile(d.Path, data, d.Mode); err != nil {
		return nil, err
	}
	return data, nil
}

// WriteFile replaces path with data atomically (temporary file in the same directory, then
// rename), with mode perm.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	if err := state.WriteFileAtomic(path, data, perm); err != nil {
		return errcode.New(errcode.IOError, "cannot write %s: %w", path, err)
	}
	return nil
}

// AddContainer loads path, appends the container and writes the file.
func AddContainer(path, key, worker, version string) error {
	return edit(path, func(d *Doc) error { return d.AddContainer(key, Container{Worker: worker, Version: version}) })
}

// SetVersion loads path, rewrites containers.<key>.version and writes the file.
func SetVersion(path, key, version string) error {
	return edit(path, func(d *Doc) error { return d.SetVersion(key, version) })
}

// RemoveContainer loads path, deletes the container and its references and writes the file.
func RemoveContainer(path, key string) error {
	return edit(path, func(d *Doc) error { return d.RemoveContainer(key) })
}

func edit(path string, fn func(*Doc) error) error {
	d, err := Load(path)
	if err != nil {
		return err
	}
	if err := fn(d); err != nil {
		return err
	}
	_, err = d.Write()
	return err
}
