package wire

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"
)

// TestObjectKeysAgreesWithEncodingJSON: ObjectKeys accepts the objects encoding/json decodes
// into a map, reports their keys unescaped, and refuses everything else.
func TestObjectKeysAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range []string{
		`{}`, ` {"a":1} `, `{"a":[1,{"b":2}],"c":"}"}`, `{"s\u0074dout_truncated":true,"x":null}`, `{"a":1,"a":2}`,
		`[]`, `null`, `"a"`, `{"a":1,}`, `{"a"}`, `{"a":1}x`, `{"a":1`, `{1:2}`, ``, `{"a":"\x"}`,
	} {
		var keys []string
		ok := ObjectKeys([]byte(s), func(k string) { keys = append(keys, k) })
		var m map[string]json.RawMessage
		err := json.Unmarshal([]byte(s), &m)
		want := err == nil && m != nil
		if ok != want {
			t.Errorf("ObjectKeys(%q) = %v, encoding/json decodes an object: %v", s, ok, want)
			continue
		}
		if !ok {
			continue
		}
		var mk []string
		for k := range m {
			mk = append(mk, k)
		}
		sort.Strings(mk)
		keys = slices.Compact(slices.Sorted(slices.Values(keys)))
		if !slices.Equal(keys, mk) {
			t.Errorf("ObjectKeys(%q) keys %q, encoding/json %q", s, keys, mk)
		}
	}
}

// TestObjectMembers: each key comes with the first byte of its value.
func TestObjectMembers(t *testing.T) {
	var got []string
	ok := ObjectMembers([]byte(` { "a" : {"x":1}, "b":"s", "c": true ,"d":[1],"e":null,"f":-1}`), func(k string, first byte) {
		got = append(got, k+string(first))
	})
	if !ok || !slices.Equal(got, []string{"a{", `b"`, "ct", "d[", "en", "f-"}) {
		t.Fatalf("%v %q", ok, got)
	}
	if ObjectMembers([]byte(`{"a":`), func(string, byte) {}) {
		t.Fatal("a truncated object accepted")
	}
}
