package main

import (
	"fmt"
	"go/ast"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The import path of this repository and of the engine module.
const (
	repoPath   = "github.com/iii-go/iii/"
	enginePath = repoPath + "engine"
)

// imports records the repository imports of one non-test file, in the package directory dir of
// module mod, for the role report.
func (st *stats) addImports(mod, dir string, f *ast.File) {
	if st.imports == nil {
		st.imports = map[string]map[string]bool{}
		st.pkgModule = map[string]string{}
	}
	dir = filepath.ToSlash(dir)
	st.pkgModule[dir] = mod
	if st.imports[dir] == nil {
		st.imports[dir] = map[string]bool{}
	}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if strings.HasPrefix(p, repoPath) {
			st.imports[dir][strings.TrimPrefix(p, repoPath)] = true
		}
	}
}

// role names what a package under engine/ is: the Go SDK (engine/protocol and below), a kit for
// tests and benches, a shared leaf (it imports no other package of the engine module, and
// another module imports it: such a package belongs in internal/base), or the engine.
func (st *stats) role(dir string) string {
	switch {
	case dir == "engine/protocol" || strings.HasPrefix(dir, "engine/protocol/"):
		return "Go SDK"
	case dir == "engine/enginetest" || dir == "engine/benchbase" || path.Base(dir) == "bench":
		return "test and bench kits"
	}
	for p := range st.imports[dir] {
		if p != dir && strings.HasPrefix(p, "engine/") {
			return "engine"
		}
	}
	for other, imps := range st.imports {
		if st.pkgModule[other] != "engine" && imps[dir] {
			return "shared leaf"
		}
	}
	return "engine"
}

// reportRoles prints the packages under engine/ by role; with verbose, each shared leaf.
func (st *stats) reportRoles(verbose bool) {
	count := map[string][]string{}
	for dir, mod := range st.pkgModule {
		if mod == "engine" {
			r := st.role(dir)
			count[r] = append(count[r], dir)
		}
	}
	fmt.Println("packages under engine/ by role (a shared leaf imports no other engine package and another module imports it):")
	for _, r := range []string{"engine", "Go SDK", "test and bench kits", "shared leaf"} {
		slices.Sort(count[r])
		fmt.Printf("  %-20s %3d\n", r, len(count[r]))
		if verbose && r == "shared leaf" {
			for _, d := range count[r] {
				fmt.Println("    " + d)
			}
		}
	}
}
