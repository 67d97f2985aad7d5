// Package causecheck finds errors that flatten their cause: calls of an error constructor (any
// function or method whose last parameters are (format string, args ...any) and whose one result
// is an error: fmt.Errorf, errcode.New, a package's own helpers) whose format passes an argument
// of type error to a verb other than %w, so errors.Is and errors.As cannot see through it. Wire
// bodies, whose text crosses a process or VM boundary where no Go cause can follow, are listed
// in WireBodies and left alone. It type-checks the repository's packages against the export data
// `go list -export` gives.
package causecheck

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// WireBodies are the constructors whose message is a wire body by design: the error text
// travels to another process (a worker, an SDK caller) or out of the VM, which receives only
// {code, message}, so a Go cause kept with %w would be dropped there anyway. Each is named as
// "import/path.Func" or "import/path.Type.Method", with the reason it is exempt.
var WireBodies = map[string]string{
	"github.com/iii-go/iii/engine/protocol.NewError":            "the {code, message} body of a function error sent to a worker or caller",
	"github.com/iii-go/iii/engine/internal/wire.NewError":       "the {code, message} body of a frame's error",
	"github.com/iii-go/iii/engine/configworker.fail":            "a configuration::* function error body sent to the caller",
	"github.com/iii-go/iii/engine/httpfn.perr":                  "the error body of an HTTP-invoked function's invocation result",
	"github.com/iii-go/iii/sandbox-libkrun/guest/fsops.invalid": "an S210 body the guest agent sends to the host",
}

// Finding is one flattened cause.
type Finding struct {
	Pos    token.Position
	Verb   string         // the verb the error argument gets, e.g. "%v"
	Arg    string         // the argument's source
	Format token.Position // where the format argument starts
	Index  int            // which of the format's verbs it is, from 0
	Callee string         // the constructor, named as WireBodies keys are ("" for a function value)
	Wire   bool           // Callee is a wire body: its text is all that travels, so this is by design
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: %s takes the error %s", f.Pos, f.Verb, f.Arg)
}

type pkg struct {
	ImportPath, Dir, Export string
	GoFiles                 []string
	Standard                bool
}

// Find type-checks the non-test files of the packages patterns name (as `go list` in dir reads
// them) and returns every flattened cause in them; those given to a wire body have Wire set and
// are not faults.
func Find(dir string, patterns ...string) ([]Finding, error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Dir,Export,GoFiles,Standard"}, patterns...)...)
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	roots, err := listed(dir, patterns)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	var mine []pkg
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		exports[p.ImportPath] = p.Export
		if roots[p.ImportPath] {
			mine = append(mine, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	var found []Finding
	for _, p := range mine {
		f, err := check(fset, imp, p)
		if err != nil {
			return nil, err
		}
		found = append(found, f...)
	}
	return found, nil
}

// listed returns the import paths patterns match, without their dependencies.
func listed(dir string, patterns []string) (map[string]bool, error) {
	cmd := exec.Command("go", append([]string{"list", "-e"}, patterns...)...)
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	m := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		m[p] = true
	}
	return m, nil
}

// check type-checks one package and inspects its constructor calls.
func check(fset *token.FileSet, imp types.Importer, p pkg) ([]Finding, error) {
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp, Error: func(error) {}}
	if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
		return nil, fmt.Errorf("type-checking %s: %w", p.ImportPath, err)
	}
	errType := types.Universe.Lookup("error").Type().Underlying().(*types.Interface)
	var found []Finding
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			at, ok := formatIndex(call, info, errType)
			callee := calleeName(call, info)
			_, wire := WireBodies[callee]
			if !ok || at >= len(call.Args) {
				return true
			}
			tv := info.Types[call.Args[at]]
			if tv.Value == nil || tv.Value.Kind() != constant.String {
				return true
			}
			verbs := Verbs(constant.StringVal(tv.Value))
			for i, arg := range call.Args[at+1:] {
				if i >= len(verbs) || verbs[i] == 'w' {
					continue
				}
				if t := info.Types[arg].Type; t != nil && types.Implements(t, errType) {
					found = append(found, Finding{fset.Position(arg.Pos()), "%" + string(verbs[i]), types.ExprString(arg), fset.Position(call.Args[at].Pos()), i, callee, wire})
				}
			}
			return true
		})
	}
	return found, nil
}

// formatIndex returns the index of the format argument when call calls an error constructor: a
// function whose last parameters are (string, ...any) and whose one result implements error.
func formatIndex(call *ast.CallExpr, info *types.Info, errType *types.Interface) (int, bool) {
	sig, ok := info.Types[call.Fun].Type.(*types.Signature)
	if !ok || !sig.Variadic() || sig.Params().Len() < 2 || sig.Results().Len() != 1 {
		return 0, false
	}
	n := sig.Params().Len()
	args, ok := sig.Params().At(n - 1).Type().(*types.Slice)
	if !ok {
		return 0, false
	}
	if elem, ok := args.Elem().Underlying().(*types.Interface); !ok || !elem.Empty() {
		return 0, false
	}
	if f, ok := sig.Params().At(n - 2).Type().(*types.Basic); !ok || f.Kind() != types.String {
		return 0, false
	}
	if !types.Implements(sig.Results().At(0).Type(), errType) {
		return 0, false
	}
	return n - 2, true
}

// calleeName names the function call calls as WireBodies keys do, or "" for a function value.
func calleeName(call *ast.CallExpr, info *types.Info) string {
	var id *ast.Ident
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.SelectorExpr:
		id = fn.Sel
	case *ast.Ident:
		id = fn
	default:
		return ""
	}
	obj, ok := info.Uses[id].(*types.Func)
	if !ok || obj.Pkg() == nil {
		return ""
	}
	if recv := obj.Signature().Recv(); recv != nil {
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if named, ok := t.(*types.Named); ok {
			return obj.Pkg().Path() + "." + named.Obj().Name() + "." + obj.Name()
		}
	}
	return obj.Pkg().Path() + "." + obj.Name()
}

// Verbs returns the verb letter of each argument a format consumes, in order ('*' for a width
// or precision taken from an argument). Explicit argument indexes ([n]) are not followed.
func Verbs(format string) []byte {
	var out []byte
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		for i++; i < len(format); i++ {
			c := format[i]
			if c == '*' {
				out = append(out, '*')
				continue
			}
			if strings.IndexByte("+-# 0123456789.[]", c) >= 0 {
				continue
			}
			if c != '%' {
				out = append(out, c)
			}
			break
		}
	}
	return out
}
