package codetables

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDuplicates shows a code declared in two tables found, and a constant that refers to
// another table's code not counted as a declaration.
func TestDuplicates(t *testing.T) {
	root := t.TempDir()
	for path, text := range map[string]string{
		"a/codes.go":          "package a\n\nconst (\n\tX = \"X_CODE\"\n\tY = \"Y_CODE\"\n)\n",
		"b/codes.go":          "package b\n\nimport \"a\"\n\nconst (\n\tX = \"X_CODE\"\n\tY = a.Y\n)\n",
		"c/other.go":          "package c\n\nconst X = \"X_CODE\"\n",
		SCodeFile:             "package scode\n\nconst S001 = \"S001\"\n",
		"d/testdata/codes.go": "package d\n\nconst X = \"X_CODE\"\n",
	} {
		p := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tables, decls, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"a/codes.go", "b/codes.go", SCodeFile}, tables); d != "" {
		t.Errorf("tables (-want +got):\n%s", d)
	}
	var got []string
	for _, ds := range Duplicates(decls) {
		for _, d := range ds {
			rel, _ := filepath.Rel(root, d.Pos.Filename)
			got = append(got, d.Code+" "+d.Name+" "+filepath.ToSlash(rel))
		}
	}
	if d := cmp.Diff([]string{"X_CODE X a/codes.go", "X_CODE X b/codes.go"}, got); d != "" {
		t.Errorf("duplicates (-want +got):\n%s", d)
	}
}
