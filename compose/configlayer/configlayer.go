// Package configlayer builds a container's configuration from its three layers, lowest first:
// the package defaults (from the registry), the entry's current value in the engine, then the
// compose file's config_override (req D1, D2, D3).
//
// Merge rules: maps merge key by key; lists and scalars replace the lower value wholesale; an
// explicit null is a value, not a delete; a variant mapping {name, config} whose override changes
// name is replaced whole. Because the engine's current value is a layer, removing a key from
// config_override does not restore its default: the key keeps the value last published.
package configlayer

import (
	"encoding/json"
	"fmt"

	"github.com/iii-go/iii/compose/sandboxadapter"
)

// Merge returns over laid on base by the rules of the package: maps merge key by key, lists and
// scalars replace (req D2). Neither argument is modified.
func Merge(base, over any) any {
	bm, bok := base.(map[string]any)
	om, ook := over.(map[string]any)
	if !bok || !ook {
		return clone(over)
	}
	if isVariant(bm) && isVariant(om) && om["name"] != bm["name"] {
		return clone(over)
	}
	out := make(map[string]any, len(bm)+len(om))
	for k, v := range bm {
		out[k] = clone(v)
	}
	for k, v := range om {
		if cur, ok := out[k]; ok {
			out[k] = Merge(cur, v)
		} else {
			out[k] = clone(v)
		}
	}
	return out
}

// Layers merges the layers lowest first; a nil layer is skipped (an absent entry, no override).
func Layers(layers ...any) any {
	var out any = map[string]any{}
	for _, l := range layers {
		if l == nil {
			continue
		}
		out = Merge(out, l)
	}
	return out
}

func isVariant(m map[string]any) bool {
	_, ok := m["name"]
	if !ok {
		return false
	}
	for k := range m {
		if k != "name" && k != "config" {
			return false
		}
	}
	return true
}

func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = clone(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = clone(e)
		}
		return out
	}
	return v
}

// Normalize converts a value decoded from YAML (map[string]interface{} with any key types,
// ints) into the JSON data model (map[string]any, float64 numbers stay as decoded) by a JSON
// round trip, so that layers from YAML and from the engine compare and merge alike.
func Normalize(v any) (any, error) {
	v, err := stringKeys(v)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func stringKeys(v any) (any, error) {
	switch x := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("configuration key %v is not a string", k)
			}
			n, err := stringKeys(e)
			if err != nil {
				return nil, err
			}
			out[ks] = n
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			n, err := stringKeys(e)
			if err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := stringKeys(e)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	}
	return v, nil
}

// AdapterEntryID is the configuration id of the adapter's settings for a project namespace:
// <namespace>-sandbox-libkrun (req C6).
func AdapterEntryID(namespace string) string { return namespace + "-" + sandboxadapter.Name }
