package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// adapterModule is the sandbox adapter's module path: VM code lives there alone (req A1).
const adapterModule = "github.com/iii-go/iii/sandbox-libkrun"

// TestNothingImportsTheAdapter fails when a Go file outside sandbox-libkrun/ imports the adapter
// module or a go.mod outside it requires it. go.work joins every module, so such an import would
// otherwise compile in workspace mode and quietly pull VM code into iii (req A1).
func TestNothingImportsTheAdapter(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "sandbox-libkrun" || path == "dist" || path == "bin" || (path != "." && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.Name() == "go.mod":
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if strings.Contains(string(b), adapterModule) {
				t.Errorf("%s requires %s: only the adapter's own module may", path, adapterModule)
			}
		case strings.HasSuffix(path, ".go"):
			files++
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, im := range f.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				if p == adapterModule || strings.HasPrefix(p, adapterModule+"/") {
					t.Errorf("%s imports %s: VM code stays in sandbox-libkrun (req A1)", fset.Position(im.Pos()), p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked only %d Go files; is the test running from the repository root?", files)
	}
}
