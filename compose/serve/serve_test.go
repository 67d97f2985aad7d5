package serve

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"testing"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/daemon"
	"github.com/iii-go/iii/compose/errcode"
)

// TestWithDefaults: Run's empty options become stdout, stderr, this binary and an installer
// that installs nothing; set ones are kept.
func TestWithDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if o.Out != os.Stdout || o.Err != os.Stderr || o.Exe != exe || o.Deps.Install == nil {
		t.Fatalf("defaults %+v", o)
	}
	pkgs, err := o.Deps.Install(context.Background(), &composefile.File{}, nil)
	if err != nil || len(pkgs) != 0 {
		t.Errorf("default installer: %v, %v", pkgs, err)
	}
	if o, _ := (Options{Exe: "/bin/iii"}).withDefaults(); o.Exe != "/bin/iii" {
		t.Errorf("Exe replaced by %q", o.Exe)
	}
}

// TestTeardownRunsInReverse: what a later phase started is stopped first.
func TestTeardownRunsInReverse(t *testing.T) {
	s := &session{}
	var got []int
	for i := range 3 {
		s.onTeardown(func() { got = append(got, i) })
	}
	s.teardown()
	if !slices.Equal(got, []int{2, 1, 0}) {
		t.Errorf("teardown order %v", got)
	}
}

// TestLoadFile: --namespace names the daemon's namespace and leaves the project's (the file's)
// as it is; without it the daemon serves the project's. Compose manages the engine only for a file
// with engine: under --up, and --engine for such a file is ENGINE_URL_CONFLICTS_WITH_MANAGED.
// A load error comes back as it is.
func TestLoadFile(t *testing.T) {
	managed := &composefile.File{Path: "/p/worker-compose.yaml", Namespace: "shop", Engine: &composefile.Engine{}}
	session := func(f *composefile.File, err error, o Options) *session {
		o.Deps = daemon.Deps{Load: func(string) (*composefile.File, error) { c := *f; return &c, err }}
		return &session{o: o}
	}
	s := session(managed, nil, Options{Up: true, Namespace: "other"})
	if err := s.loadFile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.f.Namespace != "shop" || s.ns != "other" || !s.managed {
		t.Errorf("project namespace %q, daemon's %q, managed %v", s.f.Namespace, s.ns, s.managed)
	}
	s = session(managed, nil, Options{})
	if err := s.loadFile(context.Background()); err != nil || s.managed || s.ns != "shop" {
		t.Errorf("without --up: managed %v, daemon namespace %q, %v", s.managed, s.ns, err)
	}
	err := session(managed, nil, Options{EngineURL: "ws://h:1"}).loadFile(context.Background())
	if errcode.CodeOf(err) != errcode.EngineURLConflictsWithManaged {
		t.Errorf("--engine with engine: gave %v", err)
	}
	attached := &composefile.File{Path: "/p/worker-compose.yaml", Namespace: "shop"}
	s = session(attached, nil, Options{Up: true, EngineURL: "ws://h:1"})
	if err := s.loadFile(context.Background()); err != nil || s.managed {
		t.Errorf("attached file: managed %v, %v", s.managed, err)
	}
	if err := session(attached, fs.ErrNotExist, Options{}).loadFile(context.Background()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("load error %v", err)
	}
}
