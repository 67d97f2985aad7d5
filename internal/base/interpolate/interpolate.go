// Package interpolate resolves ${VAR} and ${VAR:default} placeholders: the one expander of the
// engine's config.yaml, the product workers' configuration files and the configuration worker's
// values.
//
// In a YAML file it expands inside the scalars the document parsed to, never in the text, so a
// value holding ": ", a newline or a "#" stays the one scalar it was written as. A placeholder
// inside a flow collection ({port: ${PORT:3111}}, which iii's fixtures use) is not valid YAML as
// written; YAML therefore first swaps every placeholder for a plain word, parses, and expands
// each scalar holding one. A plain scalar takes the type its expanded text resolves to, as if
// written there (a ${PORT:3111} is the integer 3111); a quoted one stays a string.
package interpolate

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Lookup returns a variable's value and whether it is set (os.LookupEnv is one). A set variable
// wins over the default even when empty.
type Lookup func(name string) (string, bool)

// Missing is a variable without a value: unset, and its placeholder has no default.
type Missing struct {
	Name string
	Line int // of the text it stands on; 0 when not read from a text
}

// placeholder is ${NAME} or ${NAME:default}; a default runs to the first "}" on its line.
var placeholder = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:([^}\n]*))?\}`)

// String replaces every placeholder in s. A variable unset without a default keeps its
// placeholder as written and is returned in missing, once per occurrence.
func String(s string, lookup Lookup) (out string, missing []string) {
	out = placeholder.ReplaceAllStringFunc(s, func(m string) string {
		v, ok := one(m, lookup)
		if !ok {
			missing = append(missing, placeholder.FindStringSubmatch(m)[1])
		}
		return v
	})
	return out, missing
}

// one expands the placeholder m; ok is false (and m returned) when it has no value.
func one(m string, lookup Lookup) (string, bool) {
	sub := placeholder.FindStringSubmatch(m)
	if v, ok := lookup(sub[1]); ok {
		return v, true
	}
	if sub[2] != "" {
		return sub[3], true
	}
	return m, false
}

// Lone reports whether s is one placeholder and nothing else (its value may then take another
// type than string).
func Lone(s string) bool {
	loc := placeholder.FindStringIndex(s)
	return loc != nil && loc[0] == 0 && loc[1] == len(s)
}

// YAML parses the first document of text and expands the placeholders of its scalars, keys
// included; comments are not expanded. An empty document is a node with no content. A YAML
// error is yaml.v3's, with the lines of text.
func YAML(text []byte, lookup Lookup) (*yaml.Node, []Missing, error) {
	masked, ms := mask(text)
	var doc yaml.Node
	if err := yaml.Unmarshal(masked, &doc); err != nil {
		return nil, nil, err
	}
	missing := ms.expand(&doc, lookup)
	return &doc, missing, nil
}

// marks are the placeholders mask took out of a text, in order.
type marks struct {
	prefix string
	found  []mark
}

type mark struct {
	text string // the placeholder as written
	line int
}

// mask returns text with every placeholder swapped for a plain word that no YAML context
// splits, on the same line, so that the lines of a YAML error are the file's.
func mask(text []byte) ([]byte, marks) {
	ms := marks{prefix: "iiienv"}
	for bytes.Contains(text, []byte(ms.prefix)) {
		ms.prefix += "x"
	}
	var out []byte
	line, last := 1, 0
	for _, loc := range placeholder.FindAllIndex(text, -1) {
		line += bytes.Count(text[last:loc[0]], []byte("\n"))
		out = append(out, text[last:loc[0]]...)
		out = append(out, ms.prefix+strconv.Itoa(len(ms.found))+"_"...)
		ms.found = append(ms.found, mark{string(text[loc[0]:loc[1]]), line})
		last = loc[1]
	}
	return append(out, text[last:]...), ms
}

// expand expands every scalar under n that holds a mark.
func (ms marks) expand(n *yaml.Node, lookup Lookup) []Missing {
	if len(ms.found) == 0 {
		return nil
	}
	re := regexp.MustCompile(regexp.QuoteMeta(ms.prefix) + `([0-9]+)_`)
	var missing []Missing
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		for _, c := range n.Content {
			walk(c)
		}
		if n.Kind != yaml.ScalarNode || !strings.Contains(n.Value, ms.prefix) {
			return
		}
		n.Value = re.ReplaceAllStringFunc(n.Value, func(tok string) string {
			i, err := strconv.Atoi(re.FindStringSubmatch(tok)[1])
			if err != nil || i >= len(ms.found) {
				return tok
			}
			v, ok := one(ms.found[i].text, lookup)
			if !ok {
				missing = append(missing, Missing{placeholder.FindStringSubmatch(v)[1], ms.found[i].line})
			}
			return v
		})
		if n.Tag == "!!str" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
			n.Tag = "" // resolved again from the expanded text
			n.Tag = n.ShortTag()
		}
	}
	walk(n)
	return missing
}

// Decode is YAML, then decodes the document into dst as a yaml.Decoder with KnownFields does:
// a key dst has no field for is an error, with the line of text it stands on. An empty
// document leaves dst as it is. Missing variables are returned before anything is decoded.
func Decode(text []byte, lookup Lookup, dst any) ([]Missing, error) {
	masked, ms := mask(text)
	var doc yaml.Node
	if err := yaml.Unmarshal(masked, &doc); err != nil {
		return nil, err
	}
	if missing := ms.expand(&doc, lookup); len(missing) > 0 {
		return missing, nil
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	if err := unknownFields(masked, dst); err != nil {
		return nil, err
	}
	return nil, doc.Decode(dst)
}

// unknownFields decodes the masked text (whose lines are the file's) into a scratch value of
// dst's type with KnownFields and returns only its unknown-field errors: the masks themselves
// fail typed fields, which the decode of the expanded document then judges.
func unknownFields(masked []byte, dst any) error {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(masked))
	dec.KnownFields(true)
	var te *yaml.TypeError
	if err := dec.Decode(reflect.New(t.Elem()).Interface()); !errors.As(err, &te) {
		return nil
	}
	var unknown []string
	for _, e := range te.Errors {
		if strings.Contains(e, " not found in type ") {
			unknown = append(unknown, e)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return &yaml.TypeError{Errors: unknown}
}
