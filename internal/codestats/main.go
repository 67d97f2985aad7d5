// Command codestats prints the code-shape figures of the consistency issue, from the Go source
// of every module under a directory (default "."), tests left out: the types that implement
// error, the functions that print an error[CODE] line, each module's longest functions, the
// errors that flatten their cause (an error passed to %v, not %w, of any error constructor:
// through errcode and elsewhere; see internal/causecheck) and the error texts wire bodies take by
// design, the code strings declared in more than one code table (see internal/codetables), the
// SDK's exported identifiers (engine/protocol) and the environment reads outside package main
// (see internal/envreads).
//
//	go run ./internal/codestats [-top N] [-v] [dir]
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

	"github.com/iii-go/iii/internal/causecheck"
	"github.com/iii-go/iii/internal/codetables"
	"github.com/iii-go/iii/internal/envreads"
)

type fn struct {
	module, pos, name string
	lines             int
}

// stats is what one walk of the tree found.
type stats struct {
	errTypes, printers []string
	funcs              []fn
	env                []envreads.Read
	sdk                map[string]int
	sdkNames           []string
	causes             []causecheck.Finding
	tables             []string
	codes              []codetables.Decl
	packages           map[string]map[string]bool // module → its package directories
	imports            map[string]map[string]bool // package directory → the repository paths it imports
	pkgModule          map[string]string          // package directory → its module
}

// sdkDir is the public Go SDK's package, whose exported identifiers are counted.
const sdkDir = "engine/protocol"

func main() {
	top := flag.Int("top", 1, "longest functions listed per module")
	verbose := flag.Bool("v", false, "list every flattened cause, duplicate code, reason an environment read is allowed and SDK identifier")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	st, err := collect(root)
	if err == nil {
		st.causes, err = causecheck.Find(root, "github.com/iii-go/iii/...")
	}
	if err == nil {
		st.tables, st.codes, err = codetables.Read(root)
	}
	if err == nil {
		st.env, err = envreads.Find(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	st.report(*top, *verbose)
	kit, err := collectTestKit(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	kit.report(*verbose)
}

// collect parses every non-test Go file below root; this command's own directory is left out.
func collect(root string) (*stats, error) {
	st := &stats{sdk: map[string]int{}, packages: map[string]map[string]bool{}}
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
		if rel, err := filepath.Rel(root, mod); err == nil {
			mod = filepath.ToSlash(rel) // the module as a directory of the tree, "." its root
		}
		if st.packages[mod] == nil {
			st.packages[mod] = map[string]bool{}
		}
		st.packages[mod][filepath.Dir(path)] = true
		if rel, err := filepath.Rel(root, filepath.Dir(path)); err == nil {
			st.addImports(mod, rel, f)
		}
		if rel, err := filepath.Rel(root, filepath.Dir(path)); err == nil && filepath.ToSlash(rel) == sdkDir {
			if err := st.countSDK(root, f); err != nil {
				return err
			}
		}
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

// report prints the figures, with the top longest functions of each module; verbose lists
// what the counts count.
func (st *stats) report(top int, verbose bool) {
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
	st.reportPackages()
	st.reportRoles(verbose)
	var coded, elsewhere, wire int
	for _, c := range st.causes {
		switch {
		case c.Wire:
			wire++
		case strings.Contains(c.Callee, "/errcode."):
			coded++
		default:
			elsewhere++
		}
	}
	fmt.Printf("coded errors flattening their cause (an error argument to a verb other than %%w of an errcode constructor): %d\n", coded)
	fmt.Printf("flattened causes outside errcode (fmt.Errorf and other (format, args ...any) error constructors): %d\n", elsewhere)
	fmt.Printf("error texts given to wire bodies (by design; causecheck.WireBodies): %d\n", wire)
	dups := codetables.Duplicates(st.codes)
	fmt.Printf("code strings declared in more than one code table (%d tables, %d declarations): %d\n", len(st.tables), len(st.codes), len(dups))
	allowed := 0
	for _, r := range st.env {
		if _, ok := envreads.Allows(r); ok {
			allowed++
		}
	}
	fmt.Printf("environment reads outside main (os.Getenv/LookupEnv/Environ; tests, magefiles, internal/bench apart): %d (%d allowed by design: envreads.Allowed)\n", len(st.env), allowed)
	reasons := map[string]string{}
	for _, r := range st.env {
		mark := ""
		if why, ok := envreads.Allows(r); ok {
			mark = " (allowed)"
			reasons[why] = r.Key()
		}
		fmt.Printf("  %s%s\n", r, mark)
	}
	if verbose {
		for why, key := range reasons {
			fmt.Printf("  allowed as %s: %s\n", key, why)
		}
	}
	kinds := []string{"const", "var", "func", "type", "method", "field"}
	var parts []string
	total := 0
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %ss", st.sdk[k], k))
		if k != "field" {
			total += st.sdk[k]
		}
	}
	fmt.Printf("exported identifiers of %s (fields apart): %d (%s)\n", sdkDir, total, strings.Join(parts, ", "))
	if verbose {
		for _, c := range st.causes {
			kind := "cause"
			if c.Wire {
				kind = "wire"
			}
			fmt.Printf("  %s %s (%s)\n", kind, c, c.Callee)
		}
		for _, ds := range dups {
			for _, d := range ds {
				fmt.Printf("  code %s %s %s\n", d.Code, d.Name, d.Pos)
			}
		}
		for _, n := range st.sdkNames {
			fmt.Println("  sdk " + n)
		}
	}
}

// countSDK counts f's exported top-level identifiers by kind: consts, vars, funcs, types,
// methods of exported types, and the exported fields of exported struct types. An exported alias
// of a type of this repository (type Message = wire.Message) brings that type's exported methods
// and fields with it: SDK users reach them through the alias.
func (st *stats) countSDK(root string, f *ast.File) error {
	add := func(kind, name string) {
		st.sdk[kind]++
		st.sdkNames = append(st.sdkNames, kind+" "+name)
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				add("func", d.Name.Name)
			} else if recv := strings.TrimPrefix(types(d.Recv.List[0].Type), "*"); ast.IsExported(recv) {
				add("method", recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch sp := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						if n.IsExported() {
							add(d.Tok.String(), n.Name)
						}
					}
				case *ast.TypeSpec:
					if !sp.Name.IsExported() {
						continue
					}
					add("type", sp.Name.Name)
					if sel, ok := sp.Type.(*ast.SelectorExpr); ok && sp.Assign.IsValid() {
						members, err := aliasedMembers(root, f, sel)
						if err != nil {
							return err
						}
						for _, m := range members {
							add(m[0], sp.Name.Name+"."+m[1])
						}
					}
					if s, ok := sp.Type.(*ast.StructType); ok {
						for _, fl := range s.Fields.List {
							for _, n := range fl.Names {
								if n.IsExported() {
									add("field", sp.Name.Name+"."+n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	return nil
}

// repoModule is the import path prefix of this repository's modules, each in the directory its
// path names (github.com/iii-go/iii/engine is ./engine).
const repoModule = "github.com/iii-go/iii/"

// aliasedMembers lists the exported methods and struct fields ({kind, name}) of the type sel
// names, pkg.T, when pkg is a package of this repository; nil for any other package.
func aliasedMembers(root string, f *ast.File, sel *ast.SelectorExpr) ([][2]string, error) {
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return nil, nil
	}
	var dir string
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := filepath.Base(path)
		if im.Name != nil {
			name = im.Name.Name
		}
		if name == pkg.Name && strings.HasPrefix(path, repoModule) {
			dir = filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(path, repoModule)))
		}
	}
	if dir == "" {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range af.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && d.Name.IsExported() && strings.TrimPrefix(types(d.Recv.List[0].Type), "*") == sel.Sel.Name {
					out = append(out, [2]string{"method", d.Name.Name})
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok || ts.Name.Name != sel.Sel.Name {
						continue
					}
					if s, ok := ts.Type.(*ast.StructType); ok {
						for _, fl := range s.Fields.List {
							for _, n := range fl.Names {
								if n.IsExported() {
									out = append(out, [2]string{"field", n.Name})
								}
							}
						}
					}
				}
			}
		}
	}
	return out, nil
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

// reportPackages prints how many packages each module holds: the engine module's count says
// whether shared leaves still live in it (they belong in internal/base).
func (st *stats) reportPackages() {
	mods := make([]string, 0, len(st.packages))
	for m := range st.packages {
		mods = append(mods, m)
	}
	slices.Sort(mods)
	fmt.Println("packages per module (non-test Go files; commands and benches included):")
	for _, m := range mods {
		fmt.Printf("  %-16s %3d\n", m, len(st.packages[m]))
	}
}

// types renders a receiver type: T, *T or T[...] as T or *T.
func types(e ast.Expr) string {
	if st, ok := e.(*ast.StarExpr); ok {
		return "*" + envreads.RecvName(st.X)
	}
	return envreads.RecvName(e)
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
