package main

import (
	"bufio"
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
