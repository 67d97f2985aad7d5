package excerpt

import "testing"

func TestTail(t *testing.T) {
	for _, c := range []struct {
		s            string
		lines, bytes int
		want         string
	}{
		{"a\nb\nc\nd\n", 2, 0, "c\nd"},
		{"a\nb\nc\nd", 10, 0, "a\nb\nc\nd"},
		{"a\nb\n\n", 0, 0, "a\nb"},
		{"", 3, 3, ""},
		{"abcdef", 0, 3, "…def"},
		{"abc", 0, 3, "abc"},
		{"x\nabcdef\n", 1, 4, "…cdef"},
		{"aé€", 0, 4, "…€"}, // never splits a character: é's second byte is not kept alone
	} {
		if got := Tail(c.s, c.lines, c.bytes); got != c.want {
			t.Errorf("Tail(%q, %d, %d) = %q, want %q", c.s, c.lines, c.bytes, got, c.want)
		}
	}
}
