package cli

import (
	"slices"
	"testing"
)

// TestWords: a flag's value after "=" or as the next word, a missing one named, and the rest.
func TestWords(t *testing.T) {
	w := NewWords([]string{"--a=1", "--b", "2", "x=y", "--", "p", "q"})
	var got []string
	for w.Next() {
		if w.Arg == "--" {
			got = append(got, "rest:"+w.Rest()[0])
			continue
		}
		if w.Name == "x" {
			got = append(got, "pair:"+w.Val)
			continue
		}
		v, err := w.Value()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, w.Name+"="+v)
	}
	if want := []string{"--a=1", "--b=2", "pair:y", "rest:p"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	w = NewWords([]string{"--port"})
	w.Next()
	if _, err := w.Value(); err == nil || err.Error() != "--port needs a value" {
		t.Errorf("missing value: %v", err)
	}
	if w.Next() {
		t.Error("Next after the last word")
	}
}
