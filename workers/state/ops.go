package state

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Op is one step of state::update.
type Op struct {
	Type  string          `json:"type"`
	Path  Path            `json:"path"`
	Value json.RawMessage `json:"value"`
	By    *float64        `json:"by"`
}

// Path is where an op applies: a dotted string ("" is the whole value) or, as iii's SDKs send
// it for merge and append, an array of literal segments.
type Path []string

// UnmarshalJSON takes a string (split at dots) or an array of strings.
func (p *Path) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*p = pathOf(s)
		return nil
	}
	var segs []string
	if err := json.Unmarshal(b, &segs); err != nil {
		return errors.New("path must be a string or an array of strings")
	}
	*p = segs
	return nil
}

func (p Path) String() string { return strings.Join(p, ".") }

// Apply runs ops on the JSON value cur and returns the result.
func Apply(cur json.RawMessage, ops []Op) (json.RawMessage, error) {
	var doc any
	if err := json.Unmarshal(cur, &doc); err != nil {
		return nil, err
	}
	for i, op := range ops {
		var err error
		if doc, err = applyOne(doc, op); err != nil {
			return nil, protocol.NewError(errcode.InvalidArguments, "ops[%d] (%s %q): %v", i, op.Type, op.Path.String(), err)
		}
	}
	return json.Marshal(doc)
}

func pathOf(p string) []string {
	p = strings.Trim(p, ".")
	if p == "" {
		return nil
	}
	return strings.Split(p, ".")
}

// applyOne applies op at its path, creating objects along the way.
func applyOne(doc any, op Op) (any, error) {
	return at(doc, op.Path, func(v any, present bool) (any, bool, error) {
		switch op.Type {
		case "set":
			var nv any
			if err := json.Unmarshal(orNull(op.Value), &nv); err != nil {
				return nil, false, err
			}
			return nv, true, nil
		case "remove":
			return nil, false, nil
		case "increment", "decrement":
			by := 1.0
			if op.By != nil {
				by = *op.By
			} else if len(op.Value) > 0 {
				if err := json.Unmarshal(op.Value, &by); err != nil {
					return nil, false, errors.New("by must be a number")
				}
			}
			if op.Type == "decrement" {
				by = -by
			}
			n := 0.0
			if present && v != nil {
				f, ok := v.(float64)
				if !ok {
					return nil, false, errors.New("the value there is not a number")
				}
				n = f
			}
			return n + by, true, nil
		case "merge":
			var patch map[string]any
			if err := json.Unmarshal(op.Value, &patch); err != nil {
				return nil, false, errors.New("merge needs an object value")
			}
			obj, ok := v.(map[string]any)
			if !present || v == nil {
				obj, ok = map[string]any{}, true
			}
			if !ok {
				return nil, false, errors.New("the value there is not an object")
			}
			for k, pv := range patch {
				obj[k] = pv
			}
			return obj, true, nil
		case "append":
			var nv any
			if err := json.Unmarshal(orNull(op.Value), &nv); err != nil {
				return nil, false, err
			}
			nv, err := appendTo(v, nv, len(op.Path) > 1)
			return nv, err == nil, err
		}
		return nil, false, errors.New("unknown op type; use set, merge, increment, decrement, remove or append")
	})
}

// appendTo is what append makes of the value cur (nil: missing or null), as iii's state worker
// does: it pushes onto an array and concatenates a string to a string. A missing or null value
// becomes the string appended, or else a one-element array; below a nested path (two segments
// or more) it always becomes an array.
func appendTo(cur, v any, nested bool) (any, error) {
	switch c := cur.(type) {
	case nil:
		if s, ok := v.(string); ok && !nested {
			return s, nil
		}
		return []any{v}, nil
	case []any:
		return append(c, v), nil
	case string:
		s, ok := v.(string)
		if !ok {
			return nil, errors.New("the value there is a string: only a string can be appended to it (append.type_mismatch)")
		}
		return c + s, nil
	}
	return nil, errors.New("the value there is neither an array, a string nor null (append.type_mismatch)")
}

// at replaces the value at path in doc with what f returns (keep=false removes it).
func at(doc any, path []string, f func(v any, present bool) (any, bool, error)) (any, error) {
	if len(path) == 0 {
		nv, keep, err := f(doc, true)
		if err != nil || !keep {
			return nil, err
		}
		return nv, nil
	}
	obj, ok := doc.(map[string]any)
	if doc == nil {
		obj, ok = map[string]any{}, true
	}
	if !ok {
		return nil, errors.New("path " + strings.Join(path, ".") + " goes through a value that is not an object")
	}
	child, present := obj[path[0]]
	if len(path) == 1 {
		nv, keep, err := f(child, present)
		if err != nil {
			return nil, err
		}
		if keep {
			obj[path[0]] = nv
		} else {
			delete(obj, path[0])
		}
		return obj, nil
	}
	nv, err := at(child, path[1:], f)
	if err != nil {
		return nil, err
	}
	obj[path[0]] = nv
	return obj, nil
}
