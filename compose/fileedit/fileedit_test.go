package fileedit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/iii-go/iii/compose/composefile"
	"gopkg.in/yaml.v3"
)

const commented = `# Shop project: the API and its state store.
# Keep this header.
namespace: shop # the namespace containers register in

engine:
  url: ws://127.0.0.1:49134
  workers: {} # iii-sandbox moved out in 0.26
  sandbox:
    namespace: shop # run the adapter here

# Containers, in start order.
containers:
  # the state store
  state:
    worker: package://api.workers.iii.dev/state
    version: "0.22.2" # pinned on purpose
    config_override:
      adapter: {name: kv} # flow style stays
  api:
    worker: path://./workers/api
    start_after: [state]
    environment:
      LOG: ${LOG:-info} # interpolated at start
# trailing note about the file
`

func parseTree(t *testing.T, data []byte) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return &n
}

func commentLines(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, "# "); i >= 0 && !strings.Contains(line[:i], "'") {
			out = append(out, strings.TrimSpace(line[i:]))
		}
	}
	return out
}

func TestAddContainerKeepsCommentsAndKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker-compose.yaml")
	if err := os.WriteFile(path, []byte(commented), 0o640); err != nil {
		t.Fatal(err)
	}
	d, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.AddContainer("sandbox-libkrun", Container{Worker: "package://api.workers.iii.dev/sandbox-libkrun", Version: "^0.3", Comment: "added by iii compose"}); err != nil {
		t.Fatal(err)
	}
	out, err := d.Write()
	if err != nil {
		t.Fatal(err)
	}
	disk, _ := os.ReadFile(path)
	if string(disk) != string(out) {
		t.Fatal("Write returned other bytes than it wrote")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode changed to %v", st.Mode().Perm())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}

	// The new tree, minus the added container, equals the old one: every key, value, style
	// and comment in place (positions aside).
	before, after := parseTree(t, []byte(commented)), parseTree(t, out)
	ctrs, _ := get(after.Content[0], "containers")
	n := len(ctrs.Content)
	if n < 2 || ctrs.Content[n-2].Value != "sandbox-libkrun" {
		t.Fatalf("the adapter is not the last container:\n%s", out)
	}
	added := ctrs.Content[n-1]
	ctrs.Content = ctrs.Content[:n-2]
	opts := cmpopts.IgnoreFields(yaml.Node{}, "Line", "Column")
	if diff := cmp.Diff(before, after, opts); diff != "" {
		t.Fatalf("the rest of the file changed (-before +after):\n%s\n%s", diff, out)
	}
	if v, _ := get(added, "version"); v == nil || v.Value != "^0.3" || v.Style != yaml.SingleQuotedStyle {
		t.Fatalf("added version: %+v", v)
	}
	for _, c := range commentLines(commented) {
		if !strings.Contains(string(out), c) {
			t.Errorf("comment %q lost:\n%s", c, out)
		}
	}
	if !strings.Contains(string(out), "# added by iii compose\n  sandbox-libkrun:\n") {
		t.Errorf("the added container is not marked:\n%s", out)
	}
	f, err := composefile.Parse(path, out, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("edited file no longer parses: %v", err)
	}
	if got := strings.Join(f.Order, ","); got != "state,api,sandbox-libkrun" {
		t.Fatalf("container order %s", got)
	}
}

func TestSetVersionAndRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker-compose.yaml")
	if err := os.WriteFile(path, []byte(commented), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := SetVersion(path, "state", "^0.23"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveContainer(path, "state"); err == nil {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), "state:") || strings.Contains(string(b), "start_after") {
			t.Fatalf("state or its reference survived:\n%s", b)
		}
		if !strings.Contains(string(b), "# interpolated at start") || !strings.Contains(string(b), "# Keep this header.") {
			t.Fatalf("comments lost:\n%s", b)
		}
	} else {
		t.Fatal(err)
	}
	if err := SetVersion(path, "api", "1"); err == nil {
		t.Fatal("a path:// container got a version")
	}
	d, _ := Parse("x.yaml", []byte("engine:\ncontainers: {}\n"))
	if err := d.AddContainer("a", Container{Worker: "path://."}); err != nil {
		t.Fatal(err)
	}
	b, _ := d.Bytes()
	if string(b) != "engine:\ncontainers:\n  a:\n    worker: path://.\n" {
		t.Fatalf("empty flow mapping not turned into a block:\n%s", b)
	}
}

func TestEditsKeepLayout(t *testing.T) {
	src := "# four-space file\n\nnamespace: shop\n\ncontainers:\n    api:\n        worker: path://./api\n\n    state:\n        worker: package://state\n        version: \"0.22\"   # pinned\n\n# engine last\nengine:\n    sandbox: {}\n"
	d, err := Parse("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.AddContainer("sandbox-libkrun", Container{Worker: "package://sandbox-libkrun", Version: "^0.3", Comment: "added"}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetVersion("state", "^0.23"); err != nil {
		t.Fatal(err)
	}
	got, _ := d.Bytes()
	want := "# four-space file\n\nnamespace: shop\n\ncontainers:\n    api:\n        worker: path://./api\n\n    state:\n        worker: package://state\n        version: '^0.23'   # pinned\n    # added\n    sandbox-libkrun:\n        worker: package://sandbox-libkrun\n        version: '^0.3'\n\n# engine last\nengine:\n    sandbox: {}\n"
	if string(got) != want {
		t.Fatalf("layout changed:\n%s\nwant:\n%s", got, want)
	}
}
