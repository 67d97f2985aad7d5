// Package envreads finds the places outside package main that read the process environment
// (os.Getenv, os.LookupEnv, os.Environ). Each binary's main reads its environment once and hands
// it down (a Getenv func, a LookupEnv func or a KEY=VALUE list in the options a library already
// takes), so a library's zero value never depends on the variables of whichever process runs it
// and a test passes a map instead of changing its own process. The reads that remain by design
// are listed in Allowed with their reason.
package envreads

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Allowed are the reads outside main that stay, each with the reason: keyed "dir/file.go:Func"
// (Func as Read.Func names it) for one function, or "dir/" for a whole package of developer
// tooling (which builds and runs the project from a developer's shell, never inside a shipped
// binary).
var Allowed = map[string]string{
	"internal/magetargets/": "the build targets magefiles' main runs: they drive go, apt-get and the scenario harness from the developer's shell, whose whole environment (GOCACHE, PATH, proxies, III_DIST_DIR, III_TARGET) they must pass on",
	"internal/release/":     "the release build mage runs: go build of each target inherits the developer's environment (GOCACHE, GOPATH, PATH, proxies) with GOOS, GOARCH and CGO_ENABLED set",
	"internal/hostsetup/":   "mage setup: installs the host's packages with apt-get in the developer's environment and reports which accelerator $III_KVM_DEVICE gives",
	"internal/demo/":        "mage demo and its scenario: builds and starts a demo project from the developer's shell, whose PATH, image cache and host target it uses",
}

// Allows reports whether Allowed lists r, by its function or by its package.
func Allows(r Read) (string, bool) {
	if why, ok := Allowed[r.Key()]; ok {
		return why, true
	}
	why, ok := Allowed[filepath.ToSlash(filepath.Dir(r.Pos.Filename))+"/"]
	return why, ok
}

// Read is one call of os.Getenv, os.LookupEnv or os.Environ.
type Read struct {
	Pos  token.Position // Filename relative to the root walked
	Call string         // "os.Getenv", "os.LookupEnv" or "os.Environ"
	Func string         // the enclosing function: F, T.M, or "" at package level
}

// Key is r's Allowed key.
func (r Read) Key() string { return filepath.ToSlash(r.Pos.Filename) + ":" + r.Func }

func (r Read) String() string {
	where := r.Func
	if where == "" {
		where = "a package-level declaration"
	}
	return fmt.Sprintf("%s:%d %s in %s", filepath.ToSlash(r.Pos.Filename), r.Pos.Line, r.Call, where)
}

// skipped are the directories walked past: tests' data, the build's outputs, the build scripts
// (magefiles) and the benchmarks (internal/bench), which run from a developer's shell as their
// own tools and read its variables by design.
func skipped(rel string, name string) bool {
	return strings.HasPrefix(name, ".") || name == "dist" || name == "bin" || name == "testdata" ||
		name == "magefiles" || strings.HasSuffix(rel, "internal/bench")
}

// Find walks the non-test Go files below root and returns the environment reads of every package
// not named main, in walk order.
func Find(root string) ([]Read, error) {
	var out []Read
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipped(filepath.ToSlash(rel), d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name != "main" {
			out = append(out, reads(fset, f)...)
		}
		return nil
	})
	return out, err
}

// reads lists f's calls of os.Getenv, os.LookupEnv and os.Environ, each with its function.
func reads(fset *token.FileSet, f *ast.File) []Read {
	var out []Read
	for _, decl := range f.Decls {
		name := ""
		if fd, ok := decl.(*ast.FuncDecl); ok {
			name = fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = RecvName(fd.Recv.List[0].Type) + "." + name
			}
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" {
				switch sel.Sel.Name {
				case "Getenv", "LookupEnv", "Environ":
					out = append(out, Read{Pos: fset.Position(sel.Pos()), Call: "os." + sel.Sel.Name, Func: name})
				}
			}
			return true
		})
	}
	return out
}

// RecvName renders a receiver type T, *T or T[...] as T.
func RecvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return RecvName(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return RecvName(t.X)
	case *ast.IndexListExpr:
		return RecvName(t.X)
	}
	return "?"
}
