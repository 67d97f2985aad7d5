package jsonfields

import (
	"reflect"
	"slices"
	"testing"
)

type inner struct {
	B int `json:"b,omitempty"`
}

type outer struct {
	inner
	C string `json:"c"`
	A bool   `json:"a"`
}

func TestOfFlattensAndSorts(t *testing.T) {
	if got, want := Of(reflect.TypeOf(outer{})), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Of = %q, want %q", got, want)
	}
}
