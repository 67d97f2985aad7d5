// Command codestats prints the code-shape figures of the consistency issue, from the Go source
// of every module under a directory (default "."), tests left out: the types that implement
// error, the functions that print an error[CODE] line, and each module's longest functions.
//
//	go run ./internal/codestats [-top N] [dir]
package main

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

type fn struct {
	module, pos, name string
	lines             int
}

// stats is what one walk of the tree found.
type stats struct {
	errTypes, printers []string
	funcs              []fn
}

func main() {
	top := flag.Int("top", 1, "longest functions listed per module")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	st, err := collect(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	st.report(*top)
}

// collect parses every non-test Go file below root; this command's own directory is left out.
func collect(root string) (*stats, error) {
	st := &stats{}
	fset := token.NewFileSet()
	modules := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "dist" || d.Name() == "bin" || d.Name() == "testdata" || filepath.ToSlash(path) == filepath.ToSlash(filepath.Join(root, "internal/codestats"))) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				modules[path] = true
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		mod := moduleOf(path, modules)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				recv := types(fd.Recv.List[0].Type)
				name = "(" + recv + ")." + name
				if fd.Name.Name == "Error" && fd.Type.Params.NumFields() == 0 && fd.Type.Results.NumFields() == 1 {
					if id, ok := fd.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "string" {
						st.errTypes = append(st.errTypes, fmt.Sprintf("%s %s", fset.Position(fd.Pos()), recv))
					}
				}
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			st.funcs = append(st.funcs, fn{mod, start.String(), name, end.Line - start.Line + 1})
			if printsErrorLine(fd.Body) {
				st.printers = append(st.printers, fmt.Sprintf("%s %s", start, name))
			}
		}
		return nil
	})
	return st, err
}

// report prints the figures, with the top longest functions of each module.
func (st *stats) report(top int) {
	errTypes, printers, funcs := st.errTypes, st.printers, st.funcs
	fmt.Printf("error types (non-test types with Error() string): %d\n", len(errTypes))
	for _, s := range errTypes {
		fmt.Println("  " + s)
	}
	fmt.Printf("error[CODE] printers (non-test functions with a string literal holding \"error[\"): %d\n", len(printers))
	for _, s := range printers {
		fmt.Println("  " + s)
	}
	slices.SortFunc(funcs, func(a, b fn) int {
		return cmp.Or(cmp.Compare(a.module, b.module), cmp.Compare(b.lines, a.lines))
	})
	fmt.Println("longest non-test functions per module (lines from func to closing brace):")
	shown := map[string]int{}
	over := 0
	for _, f := range funcs {
		if f.lines > 80 {
			over++
		}
		if shown[f.module] >= top {
			continue
		}
		shown[f.module]++
		fmt.Printf("  %-16s %4d %s %s\n", f.module, f.lines, f.name, f.pos)
	}
	fmt.Printf("non-test functions over 80 lines: %d\n", over)
}

// moduleOf names the module directory holding path: the deepest directory with a go.mod.
func moduleOf(path string, modules map[string]bool) string {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if modules[dir] {
			return dir
		}
		if dir == "." || dir == "/" || dir == filepath.Dir(dir) {
			return "?"
		}
	}
}

// types renders a receiver type: T, *T or T[...] as T.
func types(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "*" + types(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return types(t.X)
	case *ast.IndexListExpr:
		return types(t.X)
	}
	return "?"
}

// printsErrorLine reports whether body holds a string literal with "error[" in it.
func printsErrorLine(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && strings.Contains(s, "error[") {
				found = true
			}
		}
		return !found
	})
	return found
}
