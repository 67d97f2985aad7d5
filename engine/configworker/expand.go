package configworker

import (
	"maps"
	"slices"
	"strconv"

	"github.com/iii-go/iii/internal/base/interpolate"
)

// expander resolves ${VAR} and ${VAR:default} in every string of a value (package
// interpolate). A string that is one placeholder and nothing else takes the scalar type its
// schema asks for.
type expander struct {
	lookup  interpolate.Lookup
	missing map[string]bool
}

// newExpander reads variables from lookup; nil: none is set.
func newExpander(lookup interpolate.Lookup) *expander {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	return &expander{lookup: lookup, missing: map[string]bool{}}
}

func (x *expander) missingVars() []string {
	return slices.Sorted(maps.Keys(x.missing))
}

func (x *expander) value(v any, schema any) any {
	sm, _ := schema.(map[string]any)
	switch t := v.(type) {
	case map[string]any:
		props, _ := sm["properties"].(map[string]any)
		out := make(map[string]any, len(t))
		for k, e := range t {
			var sub any
			if props != nil {
				sub = props[k]
			}
			if sub == nil && sm != nil {
				sub = sm["additionalProperties"]
			}
			out[k] = x.value(e, sub)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = x.value(e, sm["items"])
		}
		return out
	case string:
		return x.str(t, sm)
	}
	return v
}

func (x *expander) str(s string, schema map[string]any) any {
	out, missing := interpolate.String(s, x.lookup)
	for _, m := range missing {
		x.missing[m] = true
	}
	if !interpolate.Lone(s) || schema == nil {
		return out
	}
	switch schema["type"] {
	case "integer":
		if n, err := strconv.ParseInt(out, 10, 64); err == nil {
			return n
		}
	case "number":
		if f, err := strconv.ParseFloat(out, 64); err == nil {
			return f
		}
	case "boolean":
		if b, err := strconv.ParseBool(out); err == nil {
			return b
		}
	}
	return out
}
