package state

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestResolveBesideTheProject(t *testing.T) {
	t.Setenv(EnvStateDir, "")
	dir := t.TempDir()
	d, err := Resolve(filepath.Join(dir, "worker-compose.yaml"), "shop", os.Getenv(EnvStateDir))
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if want := filepath.Join(real, ".iii", "compose", "shop"); d.Path != want {
		t.Fatalf("Path = %s, want %s", d.Path, want)
	}
}

func TestResolveUnderStateDirUsesSlug(t *testing.T) {
	root := t.TempDir()
	t.Setenv(EnvStateDir, root)
	proj := filepath.Join(t.TempDir(), "orders")
	if err := os.Mkdir(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := Resolve(filepath.Join(proj, "worker-compose.yaml"), "default", os.Getenv(EnvStateDir))
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, d.Path)
	if !regexp.MustCompile(`^orders-[0-9a-f]{8}/default$`).MatchString(rel) {
		t.Fatalf("relative state path %q does not look like orders-<8 hex>/default", rel)
	}
}

func TestEnsureAndFilesAreOwnerOnly(t *testing.T) {
	t.Setenv(EnvStateDir, "")
	d, err := Resolve(filepath.Join(t.TempDir(), "worker-compose.yaml"), "default", os.Getenv(EnvStateDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	p, err := d.WriteEngineConfig([]byte("workers: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{d.Path, d.Join(LogsDir), p} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v, want owner-only", f, st.Mode().Perm())
		}
	}
	if err := d.RemoveEngineConfig(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("engine config still there: %v", err)
	}
	if err := d.RemoveEngineConfig(); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestStateRoundTripAndCorruptFile(t *testing.T) {
	t.Setenv(EnvStateDir, "")
	d, _ := Resolve(filepath.Join(t.TempDir(), "worker-compose.yaml"), "default", os.Getenv(EnvStateDir))
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	r, err := d.Load()
	if err != nil || len(r.Children) != 0 {
		t.Fatalf("empty load = %+v, %v", r, err)
	}
	r.DaemonPID = 42
	r.Children["api"] = Child{Container: "api", PID: 7, Status: "ready"}
	if err := d.Save(r); err != nil {
		t.Fatal(err)
	}
	got, err := d.Load()
	if err != nil || got.Children["api"].PID != 7 || got.DaemonPID != 42 {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	if err := os.WriteFile(d.Join(StateFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(); err == nil {
		t.Fatal("corrupt state.json loaded without error")
	}
}
