package fileedit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
)

const moved025 = `# Shop project.
namespace: shop # where the workers register

engine:
  url: ws://127.0.0.1:49134
  workers:
    # the 0.25 sandbox daemon
    iii-sandbox:
      image_allowlist: [python, node] # both presets
      default_cpus: 2

# Containers, in start order.
containers:
  api:
    worker: path://./api # the HTTP front
    scripts: {run: ./api}
`

func TestMoveSandboxConfigWritesTheReplacementKeepingComments(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "worker-compose.yaml")
	if err := os.WriteFile(path, []byte(moved025), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := composefile.Load(path, nil); errcode.CodeOf(err) != errcode.SandboxConfigMoved {
		t.Fatalf("before: %v", err)
	}
	before, after, moved, err := MoveSandboxConfig(path)
	if err != nil || !moved || string(before) != moved025 {
		t.Fatalf("moved=%v err=%v", moved, err)
	}
	f, err := composefile.Load(path, nil)
	if err != nil {
		t.Fatalf("after: %v\n%s", err, after)
	}
	if len(f.Engine.Workers) != 0 || f.Engine.Sandbox == nil || f.Engine.Sandbox.Namespace != "shop" {
		t.Fatalf("engine %+v sandbox %+v", f.Engine, f.Engine.Sandbox)
	}
	c := f.Containers["sandbox-libkrun"]
	if c == nil || c.Version != "^0.3" || c.Source.Name != "sandbox-libkrun" {
		t.Fatalf("adapter container %+v", c)
	}
	want := map[string]any{"image_allowlist": []any{"python", "node"}, "default_cpus": 2}
	if d := cmp.Diff(want, c.ConfigOverride); d != "" {
		t.Errorf("config_override (-want +got):\n%s", d)
	}
	if f.Containers["api"] == nil || f.Order[0] != "api" {
		t.Errorf("api container lost: %v", f.Order)
	}
	for _, comment := range []string{"# Shop project.", "# where the workers register", "# the 0.25 sandbox daemon", "# both presets", "# Containers, in start order.", "# the HTTP front"} {
		if !strings.Contains(string(after), comment) {
			t.Errorf("comment %q lost:\n%s", comment, after)
		}
	}
	if !strings.Contains(string(after), "workers: {}") {
		t.Errorf("no workers: {}:\n%s", after)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	if _, _, moved, err := MoveSandboxConfig(path); moved || err != nil {
		t.Fatalf("second move: %v %v", moved, err)
	}
}

func TestMoveSandboxConfigKeepsOtherWorkersAndRefusesADeclaredAdapter(t *testing.T) {
	d, err := Parse("w.yaml", []byte("engine:\n  workers:\n    configuration: {}\n    iii-sandbox: {default_cpus: 1} # tuned\n  sandbox: {namespace: boxes}\ncontainers:\n  a: {worker: path://., scripts: {run: x}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if moved, err := d.MoveSandboxConfig(); !moved || err != nil {
		t.Fatal(moved, err)
	}
	out, _ := d.Bytes()
	f, err := composefile.Parse("w.yaml", out, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "config_override: # tuned") {
		t.Errorf("line comment lost:\n%s", out)
	}
	if f.Engine.WorkerOrder[0] != "configuration" || len(f.Engine.Workers) != 1 || f.Engine.Sandbox.Namespace != "boxes" {
		t.Fatalf("engine %+v\n%s", f.Engine, out)
	}
	d, _ = Parse("w.yaml", []byte("engine:\n  workers:\n    iii-sandbox: {}\ncontainers:\n  sbx: {worker: package://sandbox-libkrun, version: '^0.3'}\n"))
	if _, err := d.MoveSandboxConfig(); errcode.CodeOf(err) != errcode.SandboxConfigMoved || !strings.Contains(err.Error(), "by hand") {
		t.Fatalf("declared adapter: %v", err)
	}
}
