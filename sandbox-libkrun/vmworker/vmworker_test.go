package vmworker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

type fakeDriver struct {
	mu        sync.Mutex
	specs     []vm.Spec
	last      *fakeMachine
	stopDelay time.Duration // how long each machine's Stop takes (a guest syncing its disk)
}

var (
	_ vm.Driver  = (*fakeDriver)(nil)
	_ vm.Machine = (*fakeMachine)(nil)
)

func (d *fakeDriver) Name() string { return "fake" }
func (d *fakeDriver) Boot(_ context.Context, spec vm.Spec) (vm.Machine, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.specs = append(d.specs, spec)
	d.last = &fakeMachine{done: make(chan struct{}), argv: make(chan []string, 1), stopDelay: d.stopDelay}
	return d.last, nil
}

type fakeMachine struct {
	once      sync.Once
	done      chan struct{}
	argv      chan []string
	mu        sync.Mutex
	env       []string
	fsCalls   []string
	stopDelay time.Duration
}

func (m *fakeMachine) Exec(_ context.Context, req vm.ExecRequest) (vm.ExecResult, error) {
	m.mu.Lock()
	m.env = req.Env
	m.mu.Unlock()
	m.argv <- req.Argv
	req.Output(1, []byte("worker up\n"))
	<-m.done
	return vm.ExecResult{}, nil
}
func (m *fakeMachine) FS(_ context.Context, op string, req json.RawMessage) (json.RawMessage, error) {
	m.mu.Lock()
	m.fsCalls = append(m.fsCalls, op+" "+string(req))
	m.mu.Unlock()
	return json.RawMessage(`{}`), nil
}
func (m *fakeMachine) KernelRelease() string { return "6.1.0-guest" }
func (m *fakeMachine) PIDs() []int           { return []int{4242} }
func (m *fakeMachine) Done() <-chan struct{} { return m.done }
func (m *fakeMachine) Stop(context.Context) error {
	m.once.Do(func() { time.Sleep(m.stopDelay); close(m.done) })
	return nil
}

type images struct{}

func (images) Resolve(_ context.Context, _, ref string, _ bool) (string, error) {
	return "/cache/" + ref, nil
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRootsCheck(t *testing.T) {
	base := t.TempDir()
	project := filepath.Join(base, "project")
	shared := filepath.Join(base, "shared")
	other := filepath.Join(base, "other")
	for _, d := range []string{project, shared, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(other, filepath.Join(project, "escape")); err != nil {
		t.Fatal(err)
	}
	r := NewRoots([]string{project, shared, "", project})
	if len(r.List()) != 2 {
		t.Fatalf("roots %v", r.List())
	}
	for _, ok := range []string{project, filepath.Join(project, "w"), shared + "/./x/.."} {
		if err := r.Check(ok); err != nil {
			t.Fatalf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{other, filepath.Join(project, "escape"), project + "-evil", filepath.Join(project, "..", "other")} {
		err := r.Check(bad)
		e, ok := scode.As(err)
		if !ok || e.Code != scode.S501 {
			t.Fatalf("%s: want S501, got %v", bad, err)
		}
		if !strings.Contains(e.Message, project) || !strings.Contains(e.Message, shared) ||
			!strings.Contains(e.Message, "https://iii.dev/docs/using-iii/sandboxes#s501") ||
			!strings.Contains(e.Message, "iii call compose::restart worker=sandbox-libkrun") ||
			e.DocsURL != "https://iii.dev/docs/using-iii/sandboxes#s501" {
			t.Fatalf("S501 envelope %+v", e)
		}
	}
}

func TestWorkerLifecycle(t *testing.T) {
	base := t.TempDir()
	project := filepath.Join(base, "project")
	write(t, filepath.Join(project, "worker-compose.yaml"), "workers: {}\n")
	write(t, filepath.Join(project, ".iii", "compose", "default", "token"), "s3cret")
	write(t, filepath.Join(project, "app", "main.py"), "print(1)")
	write(t, filepath.Join(base, "outside", "main.py"), "print(2)")
	write(t, filepath.Join(project, ".iii", "token"), "tok-123")
	drv := &fakeDriver{}
	state := filepath.Join(base, "home", ".iii", "sandbox", "workers")
	m := New(Options{Driver: drv, Images: images{}, Roots: NewRoots([]string{project}), ComposeDir: project,
		StateRoot: state, RunDir: filepath.Join(base, "run"), TokenFile: filepath.Join(project, ".iii", "token")})
	ctx := context.Background()
	call := func(op, body string) (map[string]any, error) {
		out, err := m.Handlers()[op](ctx, json.RawMessage(body))
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(out)
		var r map[string]any
		json.Unmarshal(b, &r)
		return r, nil
	}

	_, err := call("worker::start", `{"vm_id":"w1","image":"docker.io/library/python:3","dir":"`+filepath.Join(base, "outside")+`","command":["python3","main.py"]}`)
	if e, ok := scode.As(err); !ok || e.Code != scode.S501 {
		t.Fatalf("outside the roots: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "w1")); !os.IsNotExist(err) {
		t.Fatalf("a refused start left state behind: %v", err)
	}
	_, err = call("worker::start", `{"vm_id":"../x","image":"i","dir":"`+project+`","command":["x"]}`)
	if e, ok := scode.As(err); !ok || e.Code != scode.S001 {
		t.Fatalf("bad vm_id: %v", err)
	}

	r, err := call("worker::start", `{"vm_id":"w1","name":"api","image":"docker.io/library/python:3","dir":"`+project+`","command":["python3","app/main.py"],"env":{"III_URL":"ws://127.0.0.1:49134","III_TOKEN_FILE":"`+filepath.Join(project, ".iii", "token")+`"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if r["state"] != StateRunning || r["kernel_release"] != "6.1.0-guest" {
		t.Fatalf("start reply %v", r)
	}
	if argv := <-drv.last.argv; strings.Join(argv, " ") != "python3 app/main.py" {
		t.Fatalf("argv %v", argv)
	}
	drv.last.mu.Lock()
	execEnv, fsCalls := drv.last.env, drv.last.fsCalls
	drv.last.mu.Unlock()
	if strings.Join(execEnv, ",") != "III_TOKEN_FILE="+GuestTokenFile || len(fsCalls) != 1 ||
		!strings.Contains(fsCalls[0], `"path":"/run/iii/token"`) || !strings.Contains(fsCalls[0], `"content":"tok-123"`) {
		t.Fatalf("token hand-over: exec env %v, fs calls %v", execEnv, fsCalls)
	}
	spec := drv.specs[0]
	if spec.RootFS != "/cache/docker.io/library/python:3" || spec.Workdir != GuestDir || !spec.Network ||
		strings.Join(spec.Env, ",") != "III_URL=ws://10.0.2.2:49134" || len(spec.Mounts) != 1 {
		t.Fatalf("spec %+v", spec)
	}
	wd := spec.Mounts[0].Host
	if !strings.HasPrefix(wd, filepath.Join(state, "w1")) {
		t.Fatalf("the worker directory is mounted from %s, not its state copy", wd)
	}
	if _, err := os.Stat(filepath.Join(wd, "app", "main.py")); err != nil {
		t.Fatal("worker files missing from the VM's copy")
	}
	if _, err := os.Stat(filepath.Join(wd, ".iii")); !os.IsNotExist(err) {
		t.Fatal("the compose file's .iii/ reached the VM")
	}
	var log []byte
	if !enginetest.Poll(5*time.Second, func() bool {
		log, _ = os.ReadFile(filepath.Join(state, "w1", "logs", "worker.log"))
		return string(log) == "worker up\n"
	}) {
		t.Fatalf("worker log %q", log)
	}

	r, _ = call("worker::stop", `{"vm_id":"w1"}`)
	if r["state"] != StateStopped || r["state_exists"] != true {
		t.Fatalf("stop reply %v", r)
	}
	r, _ = call("worker::status", `{}`)
	if ws := r["workers"].([]any); len(ws) != 1 {
		t.Fatalf("status %v", r)
	}
	r, _ = call("worker::delete", `{"vm_id":"w1"}`)
	if r["deleted"] != true {
		t.Fatalf("delete reply %v", r)
	}
	if _, err := os.Stat(filepath.Join(state, "w1")); !os.IsNotExist(err) {
		t.Fatal("delete left the state directory")
	}
	r, _ = call("worker::status", `{"vm_id":"w1"}`)
	if r["state"] != StateAbsent || r["state_exists"] != false {
		t.Fatalf("status after delete %v", r)
	}
	r, _ = call("worker::delete", `{"vm_id":"w1"}`)
	if r["deleted"] != false {
		t.Fatalf("second delete %v", r)
	}
}

// secretsSetup is a compose directory with its .iii (project token and Compose's owner token), a
// home whose ~/.iii/engine holds an owner credential and a package cache under ~/.iii, and a
// Manager whose roots are the compose directory, the package cache and the home itself.
func secretsSetup(t *testing.T) (m *Manager, drv *fakeDriver, project, home string) {
	base := t.TempDir()
	project = filepath.Join(base, "project")
	home = filepath.Join(base, "home")
	write(t, filepath.Join(project, "app", "main.py"), "print(1)")
	write(t, filepath.Join(project, ".iii", "compose", "default", "token"), "project-token")
	write(t, filepath.Join(project, ".iii", "compose", "default", "owner-token"), "owner-token")
	write(t, filepath.Join(project, "data", "seed.txt"), "seed")
	write(t, filepath.Join(project, "data", "nested", ".iii", "token"), "nested-token")
	write(t, filepath.Join(home, ".iii", "engine", "owners", "127.0.0.1_49134"), "owner-credential")
	write(t, filepath.Join(home, ".iii", "compose", "packages", "pkg", "main.py"), "print(3)")
	drv = &fakeDriver{}
	m = New(Options{Driver: drv, Images: images{}, ComposeDir: project, Home: home,
		Roots:     NewRoots([]string{project, home, filepath.Join(home, ".iii", "compose", "packages")}),
		StateRoot: filepath.Join(base, "state"), RunDir: filepath.Join(base, "run"),
		TokenFile: filepath.Join(project, ".iii", "compose", "default", "token")})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m, drv, project, home
}

// Nothing under a .iii directory, nor under ~/.iii/engine, is ever staged into or mounted in a
// VM: the dir or mount is refused S001 naming it before anything is written. A root that lies
// under .iii itself (the package cache) still admits what is below it, and a mount that contains
// a .iii is handed over as a copy without it.
func TestNothingUnderDotIIIReachesAVM(t *testing.T) {
	m, drv, project, home := secretsSetup(t)
	start := m.Handlers()["worker::start"]
	body := func(id, dir, mounts string) string {
		return `{"vm_id":"` + id + `","image":"i","dir":"` + dir + `","command":["true"]` + mounts + `}`
	}
	for _, c := range []struct{ name, body, path string }{
		{"the compose .iii staged", body("a", filepath.Join(project, ".iii", "compose", "default"), ""), filepath.Join(project, ".iii")},
		{"the .iii itself staged", body("b", filepath.Join(project, ".iii"), ""), filepath.Join(project, ".iii")},
		{"a nested .iii staged", body("c", filepath.Join(project, "data", "nested", ".iii"), ""), filepath.Join(project, "data", "nested", ".iii")},
		{"the owner credential staged", body("d", filepath.Join(home, ".iii", "engine", "owners"), ""), filepath.Join(home, ".iii", "engine")},
		{"~/.iii staged", body("e", filepath.Join(home, ".iii"), ""), filepath.Join(home, ".iii")},
		{"the compose .iii mounted", body("f", filepath.Join(project, "app"), `,"mounts":[{"host":"`+filepath.Join(project, ".iii")+`","guest":"/x"}]`), filepath.Join(project, ".iii")},
		{"~/.iii/engine mounted", body("g", filepath.Join(project, "app"), `,"mounts":[{"host":"`+filepath.Join(home, ".iii", "engine")+`","guest":"/x"}]`), filepath.Join(home, ".iii", "engine")},
	} {
		_, err := start(context.Background(), json.RawMessage(c.body))
		e, ok := scode.As(err)
		if !ok || e.Code != scode.S001 || !strings.Contains(e.Message, c.path) {
			t.Errorf("%s: want S001 naming %s, got %v", c.name, c.path, err)
		}
	}
	if n := len(drv.specs); n != 0 {
		t.Fatalf("%d machines booted for refused starts", n)
	}
	if _, err := os.Stat(m.opt.StateRoot); !os.IsNotExist(err) {
		t.Fatalf("a refused start wrote state: %v", err)
	}

	// Admitted: a package under the cache root (itself under ~/.iii), and a mount of a directory
	// that contains a .iii, handed over as a copy without it.
	if _, err := start(context.Background(), json.RawMessage(body("pkg", filepath.Join(home, ".iii", "compose", "packages", "pkg"), ""))); err != nil {
		t.Fatalf("package cache: %v", err)
	}
	if _, err := start(context.Background(), json.RawMessage(body("mnt", filepath.Join(project, "app"), `,"mounts":[{"host":"`+filepath.Join(project, "data")+`","guest":"/data"}]`))); err != nil {
		t.Fatalf("mount containing a .iii: %v", err)
	}
	spec := drv.specs[len(drv.specs)-1]
	mnt := spec.Mounts[1].Host
	if mnt == filepath.Join(project, "data") {
		t.Fatalf("a directory holding a .iii was mounted as it is")
	}
	if _, err := os.Stat(filepath.Join(mnt, "seed.txt")); err != nil {
		t.Fatalf("the copy lacks the mount's files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "nested", ".iii")); !os.IsNotExist(err) {
		t.Fatalf("the copy holds the nested .iii: %v", err)
	}
}

// The environment Compose keeps out of worker::start arrives through env_file: only the file
// beside the adapter's token named for the vm_id, mode 0600; its values reach the VM, and the
// request's own env wins for a name in both. Any other file is refused S001 naming it.
func TestEnvFile(t *testing.T) {
	m, drv, project, _ := secretsSetup(t)
	start := m.Handlers()["worker::start"]
	good := EnvFilePath(m.opt.TokenFile, "w1")
	if want := filepath.Join(project, ".iii", "compose", "default", "vm-env", "w1.json"); good != want {
		t.Fatalf("EnvFilePath = %s, want %s", good, want)
	}
	write(t, good, `{"API_KEY":"sk-secret","III_URL":"ws://wrong"}`)
	body := func(id, file string) json.RawMessage {
		return json.RawMessage(`{"vm_id":"` + id + `","image":"i","dir":"` + filepath.Join(project, "app") + `","command":["true"],"env":{"III_URL":"ws://127.0.0.1:1"},"env_file":"` + file + `"}`)
	}
	other := filepath.Join(project, "other.json")
	write(t, other, `{"A":"b"}`)
	loose := EnvFilePath(m.opt.TokenFile, "w2")
	write(t, loose, `{"A":"b"}`)
	os.Chmod(loose, 0o644)
	for _, c := range []struct {
		id, file, want string
	}{
		{"w1", other, "is not " + good},
		{"w3", good, "is not " + EnvFilePath(m.opt.TokenFile, "w3")},
		{"w2", loose, "must be 0600"},
	} {
		_, err := start(context.Background(), body(c.id, c.file))
		if e, ok := scode.As(err); !ok || e.Code != scode.S001 || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s %s: want S001 with %q, got %v", c.id, c.file, c.want, err)
		}
	}
	if _, err := start(context.Background(), body("w1", good)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(drv.specs[0].Env, ","); got != "API_KEY=sk-secret,III_URL=ws://10.0.2.2:1" {
		t.Fatalf("VM env %s", got)
	}
}

// worker::* refuse a field they do not know, naming it, rather than ignore it.
func TestWorkerUnknownField(t *testing.T) {
	m, _, project, _ := secretsSetup(t)
	_, err := m.Handlers()["worker::start"](context.Background(), json.RawMessage(`{"vm_id":"w1","image":"i","dir":"`+project+`","command":["true"],"envs":{"A":"1"}}`))
	if e, ok := scode.As(err); !ok || e.Code != scode.S001 || !strings.Contains(e.Message, `unknown field "envs"`) {
		t.Fatalf("got %v", err)
	}
}
