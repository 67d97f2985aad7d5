// Package codetables reads the repository's error-code tables, every file named codes.go and the
// S-code table, and finds a code string declared in more than one of them. Each code has one
// owning table; another table that needs the code refers to the owner's constant, so a code has
// one doc line and cannot drift apart in two places.
package codetables

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SCodeFile is the S-code table, the one table not named codes.go.
const SCodeFile = "engine/sandbox/scode/scode.go"

// Decl is one constant whose value is a code string literal.
type Decl struct {
	Code string
	Name string
	Pos  token.Position
}

// Read walks root and returns the code tables it found (paths relative to root) and every
// constant of theirs declared with a string literal; a constant that refers to another table's
// constant is not a declaration.
func Read(root string) (tables []string, decls []Decl, err error) {
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "dist" || d.Name() == "bin" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.Name() != "codes.go" && filepath.ToSlash(rel) != SCodeFile {
			return nil
		}
		tables = append(tables, filepath.ToSlash(rel))
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING || i >= len(vs.Names) {
						continue
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						return err
					}
					decls = append(decls, Decl{Code: s, Name: vs.Names[i].Name, Pos: fset.Position(lit.Pos())})
				}
			}
		}
		return nil
	})
	return tables, decls, err
}

// Duplicates returns the codes declared more than once, sorted, each with its declarations.
func Duplicates(decls []Decl) [][]Decl {
	by := map[string][]Decl{}
	for _, d := range decls {
		by[d.Code] = append(by[d.Code], d)
	}
	var out [][]Decl
	for _, ds := range by {
		if len(ds) > 1 {
			out = append(out, ds)
		}
	}
	slices.SortFunc(out, func(a, b []Decl) int { return strings.Compare(a[0].Code, b[0].Code) })
	return out
}
