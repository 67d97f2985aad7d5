package composefile

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// maxAliasValues bounds the values that anchors and aliases may add to a decoded mapping, so an
// alias bomb ("billion laughs") is refused instead of expanded.
const maxAliasValues = 100000

// valueDecoder turns a yaml.Node tree into Go values (map[string]any, []any, scalars as yaml.v3
// resolves them) in time linear in the tree: yaml.v3's Decode checks every mapping for duplicate
// keys by comparing each key with every later one, which took 47 s for 100 000 keys.
// Duplicates are found here with a map.
type valueDecoder struct {
	p        *parser
	where    string
	aliased  int
	inAlias  int
	visiting map[*yaml.Node]bool
}

// value decodes n, the value of the setting named where (for messages).
func (p *parser) value(n *yaml.Node, where string) (any, error) {
	d := &valueDecoder{p: p, where: where, visiting: map[*yaml.Node]bool{}}
	return d.decode(n)
}

func (d *valueDecoder) decode(n *yaml.Node) (any, error) {
	if d.inAlias > 0 {
		d.aliased++
		if d.aliased > maxAliasValues {
			return nil, d.p.invalid(n, "%s: document contains excessive aliasing (anchors and aliases expand to more than %d values)", d.where, maxAliasValues)
		}
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, nil
		}
		if d.visiting[n] {
			return nil, d.p.invalid(n, "%s: anchor %q contains itself", d.where, n.Value)
		}
		d.visiting[n] = true
		d.inAlias++
		v, err := d.decode(n.Alias)
		d.inAlias--
		delete(d.visiting, n)
		return v, err
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, d.p.invalid(n, "%s: %s", d.where, trimYAML(err))
		}
		return v, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, item := range n.Content {
			v, err := d.decode(item)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		if err := d.mapping(n, out, nil); err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, d.p.invalid(n, "%s: unsupported YAML node", d.where)
}

// mapping adds the pairs of n to out. Keys are the text of scalar keys; a key may appear once.
// A merge key (<<) adds the pairs of the mapping (or list of mappings) it names that are not
// set explicitly, the first one listed winning, as yaml.v3 does. taken holds the keys a
// mapping that merges n already set; nil for a mapping decoded for itself.
func (d *valueDecoder) mapping(n *yaml.Node, out map[string]any, taken map[string]bool) error {
	lines := make(map[string]int, len(n.Content)/2)
	var merge *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return d.p.invalid(k, "%s: keys must be strings", d.where)
		}
		if first, dup := lines[k.Value]; dup {
			return d.p.invalid(k, "%s: duplicate key %q (first on line %d)", d.where, k.Value, first)
		}
		lines[k.Value] = k.Line
		if isMergeKey(k) {
			merge = v
			continue
		}
		if taken != nil {
			if taken[k.Value] {
				continue
			}
			taken[k.Value] = true
		}
		val, err := d.decode(v)
		if err != nil {
			return err
		}
		out[k.Value] = val
	}
	if merge == nil {
		return nil
	}
	if taken == nil {
		taken = make(map[string]bool, len(out))
		for k := range out {
			taken[k] = true
		}
	}
	sources := []*yaml.Node{merge}
	if merge.Kind == yaml.SequenceNode {
		sources = merge.Content
	}
	for _, s := range sources {
		if err := d.mergeFrom(s, out, taken); err != nil {
			return err
		}
	}
	return nil
}

// mergeFrom merges the mapping s (or the mapping an alias s names) into out.
func (d *valueDecoder) mergeFrom(s *yaml.Node, out map[string]any, taken map[string]bool) error {
	target, aliased := s, false
	if s.Kind == yaml.AliasNode && s.Alias != nil {
		if d.visiting[s] {
			return d.p.invalid(s, "%s: anchor %q contains itself", d.where, s.Value)
		}
		target, aliased = s.Alias, true
	}
	if target.Kind != yaml.MappingNode {
		return d.p.invalid(s, "%s: map merge requires a mapping or a list of mappings as the value", d.where)
	}
	if aliased {
		d.visiting[s] = true
		d.inAlias++
		defer func() { d.inAlias--; delete(d.visiting, s) }()
	}
	return d.mapping(target, out, taken)
}

// isMergeKey reports whether k is YAML's merge key, <<, as yaml.v3 recognises it.
func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

func trimYAML(err error) string { return strings.TrimPrefix(err.Error(), "yaml: ") }
