package main

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citation matches a pointer to a tracker a reader of the repository cannot open: the word
// issue, review or finding followed by a number (with "#" or "row" between them, or not). A
// comment says the reason instead.
var citation = regexp.MustCompile(`(?i)\b(issue|review|finding)s?\s+(row\s+)?#?[0-9]+`)

// findingID matches a review finding id: F and one or two digits. The requirement ids of
// docs/requirements.md (A1 … J6, cited as "req" and the id) are in the repository, so they may
// stay.
var findingID = regexp.MustCompile(`\bF[0-9]{1,2}\b`)

// TestNoTrackerCitations fails on a .go file of any module that cites an issue, a review or a
// finding id: the reason the code is as it is belongs in the comment, where a reader finds it.
func TestNoTrackerCitations(t *testing.T) {
	reqs, err := os.ReadFile("docs/requirements.md")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = walkGo(func(path string) error {
		files++
		if path == "docs_test.go" {
			return nil // its test of the patterns spells out what they catch
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if m := citation.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q: say the reason instead", path, n, m)
			}
			for _, id := range findingID.FindAllString(line, -1) {
				if !strings.Contains(line, "req ") || !strings.Contains(string(reqs), `id="`+id+`"`) {
					t.Errorf("%s:%d cites finding %s: say the reason instead (a requirement is cited as \"req %s\")", path, n, id, id)
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d Go files; is the test running from the repository root?", files)
	}
}

// walkGo calls fn for every .go file of the workspace, skipping hidden directories and the
// build outputs dist/ and bin/.
func walkGo(fn func(path string) error) error {
	return filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "dist" || path == "bin" || (path != "." && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			return fn(path)
		}
		return nil
	})
}

// reference matches a `path/file.go:Func` of docs/architecture.md; Func is a function, a
// method as (*T).M or T.M, or any other top-level name of the file.
var reference = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.go)(?::([A-Za-z0-9_.()*]+))?`")

// TestArchitectureReferences fails when a file or function that docs/architecture.md names does
// not exist, so a reader can follow each hop of the flows it describes.
func TestArchitectureReferences(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]map[string]bool{} // file -> its top-level names
	refs := 0
	for _, m := range reference.FindAllStringSubmatch(string(doc), -1) {
		refs++
		file, name := m[1], m[2]
		if _, ok := names[file]; !ok {
			names[file], err = topLevelNames(file)
			if err != nil {
				t.Errorf("docs/architecture.md names %s: %v", file, err)
				continue
			}
		}
		if name != "" && names[file] != nil && !names[file][name] {
			t.Errorf("docs/architecture.md names %s:%s, which %s does not declare", file, name, file)
		}
	}
	if refs < 40 {
		t.Fatalf("found only %d file references in docs/architecture.md; has its format changed?", refs)
	}
}

// topLevelNames returns what file declares at top level: functions as Name, methods as
// (*T).M or T.M after their receiver, types, variables and constants.
func topLevelNames(file string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				out[d.Name.Name] = true
				continue
			}
			typ := d.Recv.List[0].Type
			if idx, ok := typ.(*ast.IndexExpr); ok { // a generic receiver, T[P]
				typ = idx.X
			}
			switch r := typ.(type) {
			case *ast.StarExpr:
				x := r.X
				if idx, ok := x.(*ast.IndexExpr); ok {
					x = idx.X
				}
				if id, ok := x.(*ast.Ident); ok {
					out["(*"+id.Name+")."+d.Name.Name] = true
				}
			case *ast.Ident:
				out[r.Name+"."+d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out[n.Name] = true
					}
				}
			}
		}
	}
	return out, nil
}

// TestCitationPatterns: the patterns catch each citation form the comments used to carry, and
// leave requirement ids and ordinary numbers alone.
func TestCitationPatterns(t *testing.T) {
	for _, s := range []string{"(issue 27)", "issue 29, item 1", "(review #34)", "review row #5", "Issue #3", "finding 12"} {
		if !citation.MatchString(s) {
			t.Errorf("%q is not caught", s)
		}
	}
	for _, s := range []string{"the issue of 2 calls", "review the 3 files", "reviewed 4 times", "req F2", "10 issues"} {
		if citation.MatchString(s) {
			t.Errorf("%q is caught", s)
		}
	}
	if !findingID.MatchString("(F3)") || findingID.MatchString("F300") || findingID.MatchString("0xF3") {
		t.Error("findingID does not match F and one or two digits alone")
	}
}

// envName matches an III_* variable name.
var envName = regexp.MustCompile(`\bIII_[A-Z0-9_]*[A-Z0-9]\b`)

// TestEnvironmentTable fails when a .go file of any module names an III_* variable that
// docs/environment.md does not list, or the page lists one no .go file names: the page is the
// one table of them.
func TestEnvironmentTable(t *testing.T) {
	doc, err := os.ReadFile("docs/environment.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, n := range envName.FindAllString(string(doc), -1) {
		documented[n] = true
	}
	used := map[string]string{}
	err = walkGo(func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range envName.FindAllString(string(b), -1) {
			if _, ok := used[n]; !ok {
				used[n] = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for n, path := range used {
		if !documented[n] {
			t.Errorf("%s names %s, which docs/environment.md does not list; add a row saying who reads it and what it means", path, n)
		}
	}
	for n := range documented {
		if _, ok := used[n]; !ok {
			t.Errorf("docs/environment.md lists %s, which no .go file names any more; drop its row", n)
		}
	}
}
