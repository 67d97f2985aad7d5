// Package jsonfields lists the JSON field names of a struct type, for the tests that hold the
// adapter's and the guest's request and reply shapes to those of 0.25 (req A4).
package jsonfields

import (
	"reflect"
	"slices"
	"strings"
)

// Of returns the sorted JSON names of t's fields, embedded structs flattened.
func Of(t reflect.Type) []string {
	out := collect(nil, t)
	slices.Sort(out)
	return out
}

func collect(out []string, t reflect.Type) []string {
	for f := range t.Fields() {
		if f.Anonymous {
			out = collect(out, f.Type)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}
