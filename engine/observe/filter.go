package observe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Roots are the documents a filter path may start with: the call's input, its output (the
// handler's result), its error (never set: observers fire on success), its caller and its
// metadata.
var Roots = []string{"input", "output", "error", "caller", "metadata"}

// Filter is a parsed filter document: every condition must hold (an empty Filter matches every
// call). Paths are dotted ("input.order.total", "output.items.0"); a condition is a literal
// (deep equality) or an object of operators, all of which must hold: $eq, $ne, $gt, $gte, $lt,
// $lte, $in, $nin, $exists. The keys $and and $or take lists of filter documents.
type Filter struct {
	conds []cond
	and   []Filter
	or    []Filter
}

type cond struct {
	path []string
	ops  []op
}

type op struct {
	name string
	arg  any
}

var operators = map[string]bool{"$eq": true, "$ne": true, "$gt": true, "$gte": true, "$lt": true, "$lte": true,
	"$in": true, "$nin": true, "$exists": true}

// ParseFilter parses a filter document; raw empty or null is the filter that matches every call.
// An unknown root, operator or key is an error, never ignored.
func ParseFilter(raw json.RawMessage) (Filter, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return Filter{}, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return Filter{}, fmt.Errorf("filters must be an object of path: condition: %w", err)
	}
	var f Filter
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := doc[k]
		switch {
		case k == "$and" || k == "$or":
			var list []json.RawMessage
			if err := json.Unmarshal(v, &list); err != nil || len(list) == 0 {
				return Filter{}, fmt.Errorf("%s takes a non-empty list of filter documents", k)
			}
			for _, item := range list {
				sub, err := ParseFilter(item)
				if err != nil {
					return Filter{}, err
				}
				if k == "$and" {
					f.and = append(f.and, sub)
				} else {
					f.or = append(f.or, sub)
				}
			}
		case strings.HasPrefix(k, "$"):
			return Filter{}, fmt.Errorf("unknown filter key %q (top-level keys are paths, $and or $or)", k)
		default:
			c, err := parseCond(k, v)
			if err != nil {
				return Filter{}, err
			}
			f.conds = append(f.conds, c)
		}
	}
	return f, nil
}

func parseCond(path string, raw json.RawMessage) (cond, error) {
	parts := strings.Split(path, ".")
	known := false
	for _, r := range Roots {
		known = known || parts[0] == r
	}
	if !known {
		return cond{}, fmt.Errorf("filter path %q must start with one of %s", path, strings.Join(Roots, ", "))
	}
	for _, p := range parts {
		if p == "" {
			return cond{}, fmt.Errorf("filter path %q has an empty segment", path)
		}
	}
	c := cond{path: parts}
	v, err := decode(raw)
	if err != nil {
		return cond{}, fmt.Errorf("filter %q: %w", path, err)
	}
	obj, isObj := v.(map[string]any)
	if !isObj || !hasOperator(obj) {
		c.ops = []op{{"$eq", v}}
		return c, nil
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		arg := obj[name]
		if !operators[name] {
			return cond{}, fmt.Errorf("filter %q: unknown operator %q (known: $eq $ne $gt $gte $lt $lte $in $nin $exists)", path, name)
		}
		switch name {
		case "$in", "$nin":
			if _, ok := arg.([]any); !ok {
				return cond{}, fmt.Errorf("filter %q: %s takes a list", path, name)
			}
		case "$exists":
			if _, ok := arg.(bool); !ok {
				return cond{}, fmt.Errorf("filter %q: $exists takes true or false", path)
			}
		case "$gt", "$gte", "$lt", "$lte":
			if _, ok := ordered(arg); !ok {
				return cond{}, fmt.Errorf("filter %q: %s takes a number or a string", path, name)
			}
		}
		c.ops = append(c.ops, op{name, arg})
	}
	return c, nil
}

func hasOperator(obj map[string]any) bool {
	for k := range obj {
		if strings.HasPrefix(k, "$") {
			return true
		}
	}
	return false
}

// decode reads JSON with numbers kept as json.Number, so 1 and 1.0 compare equal by value.
func decode(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// Doc is what a filter reads: each root's decoded value. A root absent from the map is absent
// from the call.
type Doc map[string]any

// Matches reports whether every condition of f holds for doc.
func (f Filter) Matches(doc Doc) bool {
	for _, c := range f.conds {
		v, found := lookup(doc, c.path)
		for _, o := range c.ops {
			if !o.holds(v, found) {
				return false
			}
		}
	}
	for _, sub := range f.and {
		if !sub.Matches(doc) {
			return false
		}
	}
	if len(f.or) > 0 {
		for _, sub := range f.or {
			if sub.Matches(doc) {
				return true
			}
		}
		return false
	}
	return true
}

// Empty reports whether f matches every call.
func (f Filter) Empty() bool { return len(f.conds) == 0 && len(f.and) == 0 && len(f.or) == 0 }

func lookup(doc Doc, path []string) (any, bool) {
	v, ok := doc[path[0]]
	if !ok {
		return nil, false
	}
	for _, p := range path[1:] {
		switch t := v.(type) {
		case map[string]any:
			if v, ok = t[p]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(t) {
				return nil, false
			}
			v = t[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func (o op) holds(v any, found bool) bool {
	switch o.name {
	case "$exists":
		return found == o.arg.(bool)
	case "$eq":
		return found && equal(v, o.arg)
	case "$ne":
		return !found || !equal(v, o.arg)
	case "$in", "$nin":
		in := false
		for _, a := range o.arg.([]any) {
			in = in || (found && equal(v, a))
		}
		return in == (o.name == "$in")
	}
	if !found {
		return false
	}
	c, ok := compare(v, o.arg)
	if !ok {
		return false
	}
	switch o.name {
	case "$gt":
		return c > 0
	case "$gte":
		return c >= 0
	case "$lt":
		return c < 0
	default: // $lte
		return c <= 0
	}
}

// ordered is a number or a string's comparable form.
func ordered(v any) (any, bool) {
	switch t := v.(type) {
	case json.Number:
		f, err := t.Float64()
		return f, err == nil
	case string:
		return t, true
	}
	return nil, false
}

// compare orders a and b when both are numbers or both strings.
func compare(a, b any) (int, bool) {
	x, ok1 := ordered(a)
	y, ok2 := ordered(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	switch xv := x.(type) {
	case float64:
		yv, ok := y.(float64)
		if !ok {
			return 0, false
		}
		switch {
		case xv < yv:
			return -1, true
		case xv > yv:
			return 1, true
		}
		return 0, true
	default:
		yv, ok := y.(string)
		if !ok {
			return 0, false
		}
		return strings.Compare(xv.(string), yv), true
	}
}

// equal is deep JSON equality, numbers compared by value.
func equal(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		if y, ok := b.(json.Number); ok {
			c, ok := compare(x, y)
			return ok && c == 0
		}
		return false
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equal(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}
