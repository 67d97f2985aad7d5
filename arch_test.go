package main

import (
	"bytes"
	"encoding/binary"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iii-go/iii/internal/causecheck"
	"github.com/iii-go/iii/internal/codetables"
	"github.com/iii-go/iii/internal/envreads"
)

// adapterModule is the sandbox adapter's module path: VM code lives there alone (req A1).
const adapterModule = "github.com/iii-go/iii/sandbox-libkrun"

// TestNothingImportsTheAdapter fails when a Go file outside sandbox-libkrun/ imports the adapter
// module or a go.mod outside it requires it. go.work joins every module, so such an import would
// otherwise compile in workspace mode and quietly pull VM code into iii (req A1).
func TestNothingImportsTheAdapter(t *testing.T) {
	outside := func(dir string) bool { return dir == "sandbox-libkrun" || dir == "dist" || dir == "bin" }
	files := walkImports(t, ".", outside, func(pos token.Position, p string) {
		if p == adapterModule || strings.HasPrefix(p, adapterModule+"/") {
			t.Errorf("%s imports %s: VM code stays in sandbox-libkrun (req A1)", pos, p)
		}
	})
	if files < 100 {
		t.Fatalf("walked only %d Go files; is the test running from the repository root?", files)
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != "." && (outside(path) || strings.HasPrefix(d.Name(), ".")):
			return filepath.SkipDir
		case d.Name() != "go.mod":
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), adapterModule) {
			t.Errorf("%s requires %s: only the adapter's own module may", path, adapterModule)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestModuleLayers fails when a package imports a repository module it must not: internal/base
// (the shared leaf packages) imports none, and the engine module only internal/base. The modules
// above may use both; a leaf that needed the engine would make the layers a cycle.
func TestModuleLayers(t *testing.T) {
	const repo, base = "github.com/iii-go/iii/", "github.com/iii-go/iii/internal/base"
	allowed := map[string][]string{
		"internal/base": {base},
		"engine":        {base, repo + "engine"},
	}
	for dir, ok := range allowed {
		files := walkImports(t, dir, func(string) bool { return false }, func(pos token.Position, p string) {
			if !strings.HasPrefix(p, repo) {
				return
			}
			for _, a := range ok {
				if p == a || strings.HasPrefix(p, a+"/") {
					return
				}
			}
			t.Errorf("%s imports %s: %s may import only %v of this repository", pos, p, dir, ok)
		})
		if files < 10 {
			t.Fatalf("walked only %d Go files under %s; is the test running from the repository root?", files, dir)
		}
	}
}

// walkImports calls check with every import of the Go files below root, leaving out hidden
// directories and those skip names (paths from the repository root); it returns how many files
// it read.
func walkImports(t *testing.T, root string, skip func(dir string) bool, check func(pos token.Position, path string)) int {
	t.Helper()
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && (skip(path) || strings.HasPrefix(d.Name(), ".")):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go"):
			return nil
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			check(fset.Position(im.Pos()), p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestNoTrackedExecutables fails on any file git tracks that is an executable binary (ELF,
// Mach-O, PE): a go build in the checkout leaves such outputs beside the sources, and a commit
// of one adds megabytes to every clone for good. Build outputs belong in dist/ or bin/, ignored.
func TestNoTrackedExecutables(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git is not installed: %v", err)
		}
		t.Skipf("git is not installed, so the tracked files cannot be listed: %v", err)
	}
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := 0
	for _, path := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		st, err := os.Lstat(path)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the working tree, or a symbolic link
		}
		files++
		kind, err := executableKind(path)
		if err != nil {
			t.Fatal(err)
		}
		if kind != "" {
			t.Errorf("%s is a tracked %s executable (%d bytes): git rm --cached it and add it to .gitignore", path, kind, st.Size())
		}
	}
	if files < 100 {
		t.Fatalf("git tracks only %d regular files here; is the test running from the repository root?", files)
	}
}

// executableKind names the executable format of the file at path by its magic bytes ("ELF",
// "Mach-O", "PE"), or returns "" for any other file.
func executableKind(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 64)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", err
	}
	head = head[:n]
	if n < 4 {
		return "", nil
	}
	switch m := binary.BigEndian.Uint32(head); {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF", nil
	case m == 0xfeedface || m == 0xfeedfacf || m == 0xcefaedfe || m == 0xcffaedfe:
		return "Mach-O", nil
	case m == 0xcafebabe && n >= 8 && binary.BigEndian.Uint32(head[4:]) < 45:
		// A universal binary counts its architectures here; a Java class file, which shares
		// the magic, has its version (45 and up).
		return "Mach-O", nil
	case bytes.HasPrefix(head, []byte("MZ")) && n >= 0x40:
		// DOS header; e_lfanew at 0x3c points at the "PE\0\0" signature.
		sig := make([]byte, 4)
		if _, err := f.ReadAt(sig, int64(binary.LittleEndian.Uint32(head[0x3c:]))); err == nil && string(sig) == "PE\x00\x00" {
			return "PE", nil
		}
	}
	return "", nil
}

// TestErrorsKeepTheirCause fails on an error that flattens its cause: an argument of type error
// given to an error constructor (fmt.Errorf, errcode.New, any function taking (format string,
// args ...any) and returning an error) under a verb other than %w, as in
// fmt.Errorf("reading %s: %v", path, err). errors.Is and errors.As see through an error only to a
// cause passed with %w. Wire bodies (causecheck.WireBodies) are exempt: their text crosses a
// process boundary, where no Go cause follows.
func TestErrorsKeepTheirCause(t *testing.T) {
	found, err := causecheck.Find(".", "github.com/iii-go/iii/...")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if !f.Wire {
			t.Errorf("%s: use %%w, so the error keeps its cause", f)
		}
	}
}

// TestErrorCodesDeclaredOnce fails on a code string declared in two code tables (every codes.go
// and the S-code table): each code has one owning table and one doc line, and another table that
// needs it refers to the owner's constant, so the two cannot drift apart.
func TestErrorCodesDeclaredOnce(t *testing.T) {
	tables, decls, err := codetables.Read(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) < 5 || len(decls) < 150 {
		t.Fatalf("read %d code tables and %d codes; is the test running from the repository root?", len(tables), len(decls))
	}
	for _, ds := range codetables.Duplicates(decls) {
		for _, d := range ds[1:] {
			t.Errorf("%s: %s = %q is declared again (first at %s): refer to the owning table's constant", d.Pos, d.Name, d.Code, ds[0].Pos)
		}
	}
}

// TestEnvironmentReadOnlyInMain fails on a read of the process environment (os.Getenv,
// os.LookupEnv, os.Environ) outside package main that envreads.Allowed does not list: each main
// reads its environment once and hands it down, so a library's zero value never depends on the
// variables of the process that runs it.
func TestEnvironmentReadOnlyInMain(t *testing.T) {
	found, err := envreads.Find(".")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range found {
		seen[r.Key()] = true
		seen[filepath.ToSlash(filepath.Dir(r.Pos.Filename))+"/"] = true
		if _, ok := envreads.Allows(r); !ok {
			t.Errorf("%s: take the variable from the caller (a Getenv/LookupEnv func or an env list its main builds from the process), or list %q in envreads.Allowed with the reason", r, r.Key())
		}
	}
	for k := range envreads.Allowed {
		if !seen[k] {
			t.Errorf("envreads.Allowed lists %s, which no longer reads the environment: remove it", k)
		}
	}
}
