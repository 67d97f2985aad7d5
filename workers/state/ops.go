package state

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
)

// Op is one step of state::update.
type Op struct {
	Type  string          `json:"type"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
	By    *float64        `json:"by"`
}

// Apply runs ops on the JSON value cur and returns the result.
func Apply(cur json.RawMessage, ops []Op) (json.RawMessage, error) {
	var doc any
	if err := json.Unmarshal(cur, &doc); err != nil {
		return nil, err
	}
	for i, op := range ops {
		var err error
		if doc, err = applyOne(doc, op); err != nil {
			return nil, protocol.NewError(errcode.InvalidArguments, "ops[%d] (%s %q): %v", i, op.Type, op.Path, err)
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
	return at(doc, pathOf(op.Path), func(v any, present bool) (any, bool, error) {
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
			arr, ok := v.([]any)
			if !present || v == nil {
				arr, ok = nil, true
			}
			if !ok {
				return nil, false, errors.New("the value there is not an array")
			}
			return append(arr, nv), true, nil
		}
		return nil, false, errors.New("unknown op type; use set, merge, increment, decrement, remove or append")
	})
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
