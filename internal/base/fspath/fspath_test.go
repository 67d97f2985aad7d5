package fspath

import (
	"path/filepath"
	"testing"
)

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		path, root string
		want       bool
	}{
		{"/a/b", "/a", true},
		{"/a", "/a", true},
		{"/a/", "/a", true},
		{"/a/b/../c", "/a", true},
		{"/ab", "/a", false},
		{"/a/../b", "/a", false},
		{"/", "/a", false},
		{"/a/..b", "/a", true},
		{"/x/y", "/", true},
		{"a/b", "a", true},
		{"b", "a", false},
		{"/a/b", "a", false},
	} {
		if got := Within(filepath.FromSlash(c.path), filepath.FromSlash(c.root)); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", c.path, c.root, got, c.want)
		}
	}
}
