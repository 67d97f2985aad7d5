package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
)

// testKit is what the tests do by hand that engine/enginetest offers: engines started and
// served outside Start, deadline loops written out, and private helpers that poll a condition.
type testKit struct {
	starts, loops, helpers []string
}

// collectTestKit walks the _test.go files below root (the kit's own package left out).
func collectTestKit(root string) (*testKit, error) {
	k := &testKit{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "dist" || d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "enginetest") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		k.inspect(fset, path, f)
		return nil
	})
	return k, err
}

func (k *testKit) inspect(fset *token.FileSet, path string, f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			if servesEngine(n) {
				k.starts = append(k.starts, fset.Position(n.Pos()).String())
			}
		case *ast.ForStmt:
			if pollsByHand(n) {
				k.loops = append(k.loops, fset.Position(n.Pos()).String())
			}
		case *ast.FuncDecl:
			if polls(n) {
				k.helpers = append(k.helpers, fmt.Sprintf("%s %s", fset.Position(n.Pos()), n.Name.Name))
			}
		}
		return true
	})
}

// servesEngine reports whether a go statement serves an engine by hand: it calls a Serve or
// ServeAll of two arguments (a context and the listeners), which enginetest.Start and Go do
// with their clean-up.
func servesEngine(g *ast.GoStmt) bool {
	found := false
	ast.Inspect(g, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Serve" || sel.Sel.Name == "ServeAll") && len(c.Args) == 2 {
				found = true
			}
		}
		return !found
	})
	return found
}

// isDeadline reports whether a loop condition compares the clock with a deadline: it calls
// time.Now, time.Since or time.Until, or names a variable called deadline.
func isDeadline(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && (n.Sel.Name == "Now" || n.Sel.Name == "Since" || n.Sel.Name == "Until") {
				found = true
			}
		case *ast.Ident:
			if strings.EqualFold(n.Name, "deadline") {
				found = true
			}
		}
		return !found
	})
	return found
}

// pollsByHand reports whether a for loop is a poll written out: it reads the clock or a
// deadline (in its condition, or in an if of its body) and sleeps between two looks. A loop
// on a deadline that does not sleep is something else: one that blocks on each read until the
// deadline (frames, messages), or one that checks that a condition holds all along.
func pollsByHand(f *ast.ForStmt) bool {
	deadline, sleeps := waitsInBody(f.Body)
	return sleeps && (deadline || (f.Cond != nil && isDeadline(f.Cond)))
}

// waitsInBody reports whether a loop body has an if whose condition reads the clock or a
// deadline, and whether it calls time.Sleep or time.After; nested loops and functions are
// left out.
func waitsInBody(b *ast.BlockStmt) (deadline, sleeps bool) {
	for _, st := range b.List {
		ast.Inspect(st, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit, *ast.ForStmt, *ast.RangeStmt:
				return false
			case *ast.IfStmt:
				if isDeadline(n.Cond) {
					deadline = true
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && (n.Sel.Name == "Sleep" || n.Sel.Name == "After") {
					sleeps = true
				}
			}
			return true
		})
	}
	return deadline, sleeps
}

// polls reports whether fd is a test helper that waits for a condition: it takes a func() bool
// and sleeps in a loop.
func polls(fd *ast.FuncDecl) bool {
	if fd.Body == nil || fd.Recv != nil {
		return false
	}
	takesCond := false
	for _, p := range fd.Type.Params.List {
		if ft, ok := p.Type.(*ast.FuncType); ok && ft.Params.NumFields() == 0 && ft.Results.NumFields() == 1 {
			if id, ok := ft.Results.List[0].Type.(*ast.Ident); ok && id.Name == "bool" {
				takesCond = true
			}
		}
	}
	if !takesCond {
		return false
	}
	sleeps := false
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" && (sel.Sel.Name == "Sleep" || sel.Sel.Name == "After" || sel.Sel.Name == "NewTicker") {
				sleeps = true
			}
		}
		return !sleeps
	})
	return sleeps
}

// report prints the three counts; verbose lists each site.
func (k *testKit) report(verbose bool) {
	for _, s := range []struct {
		what  string
		sites []string
	}{
		{"engines served by hand in tests (a go statement calling Serve or ServeAll, not enginetest.Start or Go)", k.starts},
		{"deadline loops written out in tests (a for that reads the clock or a deadline and sleeps between looks)", k.loops},
		{"private poll helpers in tests (take a func() bool, sleep in a loop)", k.helpers},
	} {
		fmt.Printf("%s: %d\n", s.what, len(s.sites))
		if verbose {
			for _, site := range s.sites {
				fmt.Println("  " + site)
			}
		}
	}
}
