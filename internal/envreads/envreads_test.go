package envreads

import (
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Find reports each read of a library by file, line and function; a main package, a test file,
// magefiles and a benchmark are not libraries, so their reads are left out.
func TestFind(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"lib/lib.go":               "package lib\n\nimport \"os\"\n\ntype T struct{}\n\nfunc (T) M() []string { return os.Environ() }\n\nvar v = os.Getenv(\"A\")\n",
		"lib/lib_test.go":          "package lib\n\nimport \"os\"\n\nfunc f() { os.Getenv(\"B\") }\n",
		"cmd/x/main.go":            "package main\n\nimport \"os\"\n\nfunc main() { os.LookupEnv(\"C\") }\n",
		"magefiles/mage.go":        "package tools\n\nimport \"os\"\n\nfunc g() { os.Getenv(\"D\") }\n",
		"tool/internal/bench/b.go": "package bench\n\nimport \"os\"\n\nfunc h() { os.Getenv(\"E\") }\n",
		"other/other.go":           "package other\n\nimport \"os\"\n\nfunc Look() (string, bool) { return os.LookupEnv(\"F\") }\n",
		"testdata/skipped/lib.go":  "package skipped\n\nimport \"os\"\n\nfunc i() { os.Getenv(\"G\") }\n",
	}
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := Find(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range found {
		got = append(got, r.String())
	}
	slices.Sort(got)
	want := []string{
		"lib/lib.go:7 os.Environ in T.M",
		"lib/lib.go:9 os.Getenv in a package-level declaration",
		"other/other.go:5 os.LookupEnv in Look",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Find = %q, want %q", got, want)
	}
}

// Allows takes a function's key or its package's directory.
func TestAllows(t *testing.T) {
	r := Read{Pos: tokenPos("internal/release/release.go"), Func: "BuildBinary"}
	if _, ok := Allows(r); !ok {
		t.Fatalf("%s: a package of developer tooling is allowed", r.Key())
	}
	r = Read{Pos: tokenPos("internal/base/platform/platform.go"), Func: "Host"}
	if _, ok := Allows(r); ok {
		t.Fatalf("%s allowed", r.Key())
	}
}

func tokenPos(file string) token.Position { return token.Position{Filename: file, Line: 1} }
