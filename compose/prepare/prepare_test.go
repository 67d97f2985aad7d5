package prepare

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/internal/base/platform"
)

// project writes a registry (sandbox-libkrun 0.2.2 and 0.3.1 for glibc Linux, a bundle) and a
// compose file, and returns the file's path.
func project(t *testing.T, compose string) string {
	t.Helper()
	root := t.TempDir()
	reg := filepath.Join(root, "reg")
	bin := filepath.Join(root, "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.2.2", "0.3.1"} {
		if err := registry.Publish(reg, registry.Package{Name: "sandbox-libkrun", Version: v, Type: registry.TypeBinary,
			Artifacts: map[string]string{"x86_64-unknown-linux-gnu": bin}, Config: map[string]any{"default_cpus": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	bundle, _ := registry.TarGz(map[string][]byte{"iii.worker.yaml": []byte("runtime: {base_image: python}\n")})
	if err := os.WriteFile(filepath.Join(root, "b.tar.gz"), bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := registry.Publish(reg, registry.Package{Name: "vm", Version: "1.0.0", Type: registry.TypeBundle,
		Artifacts: map[string]string{registry.BundleKey: filepath.Join(root, "b.tar.gz")}}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(registry.EnvURL, "file://"+reg)
	dir := filepath.Join(root, "proj")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "worker-compose.yaml")
	if err := os.WriteFile(path, []byte(compose), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func opts(t *testing.T, triple string, frozen bool) Options {
	tg := platform.Parse(triple)
	return Options{Target: &tg, Frozen: frozen, CacheDir: filepath.Join(t.TempDir(), "cache"), Lookup: os.LookupEnv}
}

const sandboxed = "namespace: shop\nengine:\n  sandbox: {}\n"

func TestAddsAdapterThenFrozenPasses(t *testing.T) {
	path := project(t, sandboxed)
	ctx := context.Background()
	if _, err := Run(ctx, path, opts(t, "x86_64-unknown-linux-gnu", true)); errcode.CodeOf(err) != errcode.SandboxAdapterNotDeclared {
		t.Fatalf("frozen before the adapter is declared: %v", err)
	}
	res, err := Run(ctx, path, opts(t, "x86_64-unknown-linux-gnu", false))
	if err != nil {
		t.Fatal(err)
	}
	a := res.Adapter
	if !a.Added || a.Container != "sandbox-libkrun" || a.Namespace != "shop" || !res.FileWritten || !res.LockWritten {
		t.Fatalf("adapter %+v, wrote file=%v lock=%v", a, res.FileWritten, res.LockWritten)
	}
	p := res.Packages["sandbox-libkrun"]
	if p.Version != "0.3.1" || p.Exec != filepath.Join(p.Dir, "sandbox-libkrun") || p.DefaultConfig["default_cpus"] == nil {
		t.Fatalf("package %+v", p)
	}
	if _, ok := res.File.Containers["sandbox-libkrun"]; !ok {
		t.Fatal("the result's file does not hold the added container")
	}
	before, _ := os.ReadFile(path)
	lockBefore, _ := os.ReadFile(res.LockPath)
	res, err = Run(ctx, path, opts(t, "x86_64-unknown-linux-gnu", true))
	if err != nil || res.FileWritten || res.LockWritten {
		t.Fatalf("frozen after: %v %+v", err, res)
	}
	after, _ := os.ReadFile(path)
	lockAfter, _ := os.ReadFile(res.LockPath)
	if string(before) != string(after) || string(lockBefore) != string(lockAfter) {
		t.Fatal("frozen run changed the file or the lock")
	}
}

func TestLockedEntriesNeedNoRegistry(t *testing.T) {
	path := project(t, "containers:\n  s: {worker: package://sandbox-libkrun, version: '^0.2'}\n")
	o := opts(t, "x86_64-unknown-linux-gnu", false)
	if _, err := Run(context.Background(), path, o); err != nil {
		t.Fatal(err)
	}
	t.Setenv(registry.EnvURL, "file:///nonexistent")
	res, err := Run(context.Background(), path, o)
	if err != nil {
		t.Fatalf("an unchanged container was resolved again: %v", err)
	}
	if res.Packages["s"].Version != "0.2.2" || res.Packages["s"].Fresh {
		t.Fatalf("%+v", res.Packages["s"])
	}
	o.Update = []string{"s"}
	if _, err := Run(context.Background(), path, o); errcode.CodeOf(err) != errcode.RegistryUnreachable {
		t.Fatalf("an updated container must be resolved again: %v", err)
	}
}

func TestPlatformRules(t *testing.T) {
	path := project(t, sandboxed)
	before, _ := os.ReadFile(path)
	_, err := Run(context.Background(), path, opts(t, "aarch64-unknown-linux-musl", false))
	if errcode.CodeOf(err) != errcode.UnsupportedPlatform || !strings.Contains(err.Error(), "no build for aarch64-unknown-linux-musl. It ships: x86_64-unknown-linux-gnu") {
		t.Fatalf("musl: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("a refused run edited the file")
	}
	bundle := project(t, "containers:\n  v: {worker: package://vm, version: '1'}\n")
	o := opts(t, "x86_64-pc-windows-msvc", false)
	if _, err := Run(context.Background(), bundle, o); errcode.CodeOf(err) != errcode.BundleNeedsAVM {
		t.Fatalf("windows bundle: %v", err)
	}
	if _, err := os.Stat(o.CacheDir); !os.IsNotExist(err) {
		t.Fatalf("something was downloaded: %v", err)
	}
	res, err := Run(context.Background(), bundle, opts(t, "x86_64-unknown-linux-gnu", false))
	if err != nil || strings.Join(res.VMWorkers, ",") != "v" || !res.Adapter.Added {
		t.Fatalf("linux bundle: %v %+v", err, res)
	}
}

func TestOtherNamespaceNeedsNoAdapter(t *testing.T) {
	path := project(t, "namespace: shop\nengine:\n  sandbox: {namespace: sandboxes}\n")
	res, err := Run(context.Background(), path, opts(t, "x86_64-unknown-linux-gnu", true))
	if err != nil || res.Adapter.Needed != "" || res.Adapter.Namespace != "sandboxes" {
		t.Fatalf("%v %+v", err, res)
	}
}

func TestCheckMatchesRunWithoutWriting(t *testing.T) {
	path := project(t, sandboxed)
	f, err := composefile.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, errs := Check(f, nil, platform.Parse("x86_64-unknown-linux-gnu"))
	_, runErr := Run(context.Background(), path, opts(t, "x86_64-unknown-linux-gnu", true))
	if len(errs) != 1 || errcode.CodeOf(errs[0]) != errcode.SandboxAdapterNotDeclared || errs[0].Error() != runErr.Error() {
		t.Fatalf("Check: %+v %v; Run: %v", a, errs, runErr)
	}
	if a.Needed == "" || a.Container != "" {
		t.Fatalf("adapter %+v", a)
	}
	res, err := Run(context.Background(), path, opts(t, "x86_64-unknown-linux-gnu", false))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	a, errs = Check(res.File, res.Lock, platform.Parse("aarch64-unknown-linux-musl"))
	if len(errs) != 1 || errcode.CodeOf(errs[0]) != errcode.UnsupportedPlatform || a.Container != "sandbox-libkrun" {
		t.Fatalf("musl: %+v %v", a, errs)
	}
	if _, errs = Check(res.File, res.Lock, platform.Parse("x86_64-unknown-linux-gnu")); len(errs) != 0 {
		t.Fatalf("declared and locked: %v", errs)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("Check edited the file")
	}
}

// A pin of iii's versions that no published version satisfies resolves through the registry's
// compatibility table: the run says so, the lock keeps the pin and the build, and --frozen
// installs the same build and says so again.
func TestIIIPinMappedThroughTheCompatibilityTable(t *testing.T) {
	path := project(t, "containers:\n  state:\n    worker: package://api.workers.iii.dev/state\n    version: \"0.22.2\"\n")
	bin := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	reg := strings.TrimPrefix(os.Getenv(registry.EnvURL), "file://")
	if err := registry.Publish(reg, registry.Package{Name: "state", Version: "0.1.0", Type: registry.TypeBinary,
		Artifacts: map[string]string{"x86_64-unknown-linux-gnu": bin}, IIILines: []string{"0.21", "0.22"}}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	o := opts(t, "x86_64-unknown-linux-gnu", false)
	o.Out = &out
	res, err := Run(context.Background(), path, o)
	if err != nil {
		t.Fatal(err)
	}
	const said = "Mapped state: iii 0.22.2 → iii-go build 0.1.0 (the registry's compatibility table maps iii's 0.22 line onto it)"
	if !strings.Contains(out.String(), said) {
		t.Errorf("output does not show the mapping:\n%s", out.String())
	}
	e := res.Lock.Containers["state"]
	if e.Requested != "0.22.2" || e.Resolved.Version != "0.1.0" || e.Resolved.IIILine != "0.22" || res.Packages["state"].Version != "0.1.0" {
		t.Fatalf("lock entry %+v", e)
	}
	out.Reset()
	o.Frozen = true
	res, err = Run(context.Background(), path, o)
	if err != nil || res.Packages["state"].Version != "0.1.0" {
		t.Fatalf("frozen: %v", err)
	}
	if !strings.Contains(out.String(), "Locked state: iii 0.22.2 → iii-go build 0.1.0") {
		t.Errorf("frozen output does not show the mapping:\n%s", out.String())
	}

	if err := os.WriteFile(path, []byte("containers:\n  state: {worker: package://state, version: \"0.23.1\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.Frozen = false
	_, err = Run(context.Background(), path, o)
	if errcode.CodeOf(err) != errcode.PackageNotResolved || !strings.Contains(err.Error(), "container 'state': no version of 'state' satisfies '0.23.1' (published: 0.1.0), and it is on none of iii's version lines the registry's compatibility table serves (iii 0.22 → 0.1.0, iii 0.21 → 0.1.0)") {
		t.Fatalf("a pin outside every line: %v", err)
	}
}
