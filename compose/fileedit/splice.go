package fileedit

import (
	"bytes"
	"strings"

	"gopkg.in/yaml.v3"
)

// The Node API re-renders the whole file: comments, keys and order survive, but blank lines and
// the user's indentation do not. So each edit is also tried as a text splice into the current
// bytes, and the splice is kept only when it parses to exactly the tree the Node API produced;
// otherwise the re-rendered file is used.

// apply runs edit on a copy of the tree, then tries splice on the text; it keeps the splice
// when its tree equals the edited tree.
func (d *Doc) apply(edit func(root *yaml.Node) error, splice func(text []byte, before *yaml.Node) ([]byte, bool)) error {
	edited := clone(d.doc)
	if err := edit(edited.Content[0]); err != nil {
		return err
	}
	if splice != nil && d.text != nil {
		if text, ok := splice(d.text, d.doc); ok {
			var got yaml.Node
			if yaml.Unmarshal(text, &got) == nil && sameTree(&got, edited) {
				d.text, d.doc = text, &got
				return nil
			}
		}
	}
	d.doc = edited
	d.text = nil
	return nil
}

func clone(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = clone(k)
	}
	return &c
}

// sameTree compares two trees ignoring positions.
func sameTree(a, b *yaml.Node) bool {
	if a.Kind != b.Kind || a.Style != b.Style || a.ShortTag() != b.ShortTag() || a.Value != b.Value ||
		a.HeadComment != b.HeadComment || a.LineComment != b.LineComment || a.FootComment != b.FootComment ||
		len(a.Content) != len(b.Content) || a.Anchor != b.Anchor {
		return false
	}
	for i := range a.Content {
		if !sameTree(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}

func lines(text []byte) []string { return strings.SplitAfter(string(text), "\n") }

// spliceAdd inserts a rendered container after the last line of the containers block.
func spliceAdd(key string, body *yaml.Node, comment string) func([]byte, *yaml.Node) ([]byte, bool) {
	return func(text []byte, doc *yaml.Node) ([]byte, bool) {
		root := doc.Content[0]
		ctrs, i := get(root, "containers")
		if ctrs == nil || ctrs.Kind != yaml.MappingNode || ctrs.Style&yaml.FlowStyle != 0 || len(ctrs.Content) == 0 {
			return nil, false
		}
		keyCol := ctrs.Content[0].Column
		childIndent := 2
		if first := ctrs.Content[1]; first.Kind == yaml.MappingNode && first.Style&yaml.FlowStyle == 0 && len(first.Content) > 0 {
			childIndent = first.Content[0].Column - keyCol
		}
		if childIndent < 1 {
			return nil, false
		}
		ls := lines(text)
		if len(ls) > 0 && ls[len(ls)-1] == "" {
			ls = ls[:len(ls)-1]
		}
		// The block ends before the next top-level key (and the comments and blank lines
		// above it), or at the end of the file.
		end := len(ls)
		if i+2 < len(root.Content) {
			end = root.Content[i+2].Line - 1
		}
		for end > 0 {
			t := strings.TrimRight(ls[end-1], "\r\n")
			if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") {
				end--
				continue
			}
			break
		}
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(childIndent)
		if err := enc.Encode(&yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{str(key), body}}); err != nil {
			return nil, false
		}
		pad := strings.Repeat(" ", keyCol-1)
		var snippet strings.Builder
		if comment != "" {
			snippet.WriteString(pad + "# " + comment + "\n")
		}
		for _, l := range strings.SplitAfter(strings.TrimRight(b.String(), "\n"), "\n") {
			snippet.WriteString(pad + strings.TrimRight(l, "\n") + "\n")
		}
		var out strings.Builder
		for _, l := range ls[:end] {
			out.WriteString(l)
		}
		if end > 0 && !strings.HasSuffix(ls[end-1], "\n") {
			out.WriteString("\n")
		}
		out.WriteString(snippet.String())
		for _, l := range ls[end:] {
			out.WriteString(l)
		}
		return []byte(out.String()), true
	}
}

// spliceScalar replaces the scalar token of the value of containers.<key>.<field> with a
// single-quoted value.
func spliceScalar(key, field, value string) func([]byte, *yaml.Node) ([]byte, bool) {
	return func(text []byte, doc *yaml.Node) ([]byte, bool) {
		c, _ := get(mustContainers(doc), key)
		v, _ := get(c, field)
		if v == nil || v.Kind != yaml.ScalarNode || v.Line < 1 || v.Column < 1 {
			return nil, false
		}
		ls := lines(text)
		if v.Line > len(ls) {
			return nil, false
		}
		line := ls[v.Line-1]
		start := v.Column - 1
		if start >= len(line) {
			return nil, false
		}
		n := tokenLen(line[start:])
		if n <= 0 {
			return nil, false
		}
		ls[v.Line-1] = line[:start] + "'" + strings.ReplaceAll(value, "'", "''") + "'" + line[start+n:]
		return []byte(strings.Join(ls, "")), true
	}
}

func mustContainers(doc *yaml.Node) *yaml.Node {
	c, _ := get(doc.Content[0], "containers")
	return c
}

// tokenLen is the length of the scalar token at the start of s: a quoted string, or a plain
// scalar up to a comment, a flow delimiter or the end of the line.
func tokenLen(s string) int {
	switch {
	case strings.HasPrefix(s, "'"):
		for i := 1; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					i++
					continue
				}
				return i + 1
			}
		}
		return -1
	case strings.HasPrefix(s, "\""):
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return -1
	}
	end := len(strings.TrimRight(s, "\r\n"))
	for i := 0; i < end; i++ {
		if (s[i] == '#' && i > 0 && (s[i-1] == ' ' || s[i-1] == '\t')) || s[i] == ',' || s[i] == '}' || s[i] == ']' {
			end = i
			break
		}
	}
	return len(strings.TrimRight(s[:end], " \t"))
}
