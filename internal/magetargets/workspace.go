package magetargets

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// modules are the workspace's modules as go.work lists them, the root first: read from the file
// rather than copied, so a module added there is vetted, tested and benched without a second edit.
var modules = mustWorkModules()

func mustWorkModules() []string {
	ms, err := workModules()
	if err != nil {
		panic(err)
	}
	return ms
}

// workModules reads the use directives of the go.work in this directory or the nearest parent.
func workModules() ([]string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.work"))
		if err == nil {
			defer f.Close()
			return parseUses(bufio.NewScanner(f))
		}
		up := filepath.Dir(dir)
		if up == dir {
			return nil, fmt.Errorf("no go.work in %s or a parent directory", dir)
		}
		dir = up
	}
}

// parseUses returns the module directories of go.work's use directives (single or a block),
// as slash paths without a leading "./", the root "." first.
func parseUses(sc *bufio.Scanner) ([]string, error) {
	var out []string
	add := func(p string) {
		p = strings.TrimPrefix(filepath.ToSlash(strings.Trim(p, `"`)), "./")
		if p == "" || p == "." {
			out = append([]string{"."}, out...)
			return
		}
		out = append(out, p)
	}
	inBlock := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		switch {
		case inBlock && line == ")":
			inBlock = false
		case inBlock && line != "":
			add(line)
		case line == "use (":
			inBlock = true
		case strings.HasPrefix(line, "use "):
			add(strings.TrimSpace(strings.TrimPrefix(line, "use ")))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 || out[0] != "." {
		return nil, fmt.Errorf("go.work lists no root module (use .)")
	}
	return out, nil
}
