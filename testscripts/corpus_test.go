package testscripts

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	scenarioName = regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*\.txtar$`)
	reqID        = regexp.MustCompile(`^[A-J][0-9]+$`)
	indexAnchor  = regexp.MustCompile(`<a id="([A-J][0-9]+)"></a>`)
)

// TestCorpus keeps the scenarios readable and their requirement claims checkable: every
// scenario is named in snake_case, opens with a comment saying what it shows, and carries one
// line `# req: <IDs>` whose IDs are anchors of docs/requirements.md (or `# req: none` for
// behaviour outside the upgrade guide, which its header then explains).
func TestCorpus(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "docs", "requirements.md"))
	if err != nil {
		t.Fatal(err)
	}
	index := map[string]bool{}
	for _, m := range indexAnchor.FindAllStringSubmatch(string(raw), -1) {
		index[m[1]] = true
	}
	if len(index) == 0 {
		t.Fatal("docs/requirements.md has no requirement anchors")
	}
	files, err := filepath.Glob(filepath.Join("*", "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios found: %v", err)
	}
	for _, f := range files {
		if !scenarioName.MatchString(filepath.Base(f)) {
			t.Errorf("%s: scenario names are snake_case", f)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		if !strings.HasPrefix(lines[0], "# ") {
			t.Errorf("%s: a scenario opens with a comment saying what it shows", f)
		}
		var reqs []string
		for _, l := range lines {
			if strings.HasPrefix(l, "-- ") {
				break
			}
			if rest, ok := strings.CutPrefix(l, "# req:"); ok {
				reqs = append(reqs, rest)
			}
		}
		if len(reqs) != 1 {
			t.Errorf("%s: %d `# req:` lines, want one", f, len(reqs))
			continue
		}
		ids := strings.Fields(reqs[0])
		if len(ids) == 1 && ids[0] == "none" {
			continue
		}
		if len(ids) == 0 {
			t.Errorf("%s: `# req:` names no ID (write `# req: none` for behaviour outside the guide)", f)
		}
		for _, id := range ids {
			if !reqID.MatchString(id) || !index[id] {
				t.Errorf("%s: %q is not a requirement of docs/requirements.md", f, id)
			}
		}
	}
}

// TestREADMEDocumentsCommands fails when a registered testscript command or condition is missing
// from testscripts/README.md, where every one is explained.
func TestREADMEDocumentsCommands(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	var missing []string
	for name := range customCmds {
		if !strings.Contains(doc, "`"+name+" ") && !strings.Contains(doc, "`"+name+"`") && !strings.Contains(doc, "`! "+name) {
			missing = append(missing, name)
		}
	}
	for name := range conditions {
		if !strings.Contains(doc, "["+name+"]") {
			missing = append(missing, "["+name+"]")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("testscripts/README.md does not document: %s", strings.Join(missing, ", "))
	}
}
