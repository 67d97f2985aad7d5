package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// fakeDriver boots fakeMachines in memory.
type fakeDriver struct {
	mu       sync.Mutex
	bootErr  error
	specs    []vm.Spec
	machines []*fakeMachine
	execFn   func(vm.ExecRequest) (vm.ExecResult, error)
	fsFn     func(op string, req map[string]any) (json.RawMessage, error)
}

var (
	_ vm.Driver  = (*fakeDriver)(nil)
	_ vm.Machine = (*fakeMachine)(nil)
)

func (d *fakeDriver) Name() string { return "fake" }

func (d *fakeDriver) Boot(_ context.Context, spec vm.Spec) (vm.Machine, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bootErr != nil {
		return nil, d.bootErr
	}
	m := &fakeMachine{spec: spec, done: make(chan struct{}), execFn: d.execFn, fsFn: d.fsFn}
	d.specs = append(d.specs, spec)
	d.machines = append(d.machines, m)
	return m, nil
}

type fsCall struct {
	op  string
	req map[string]any
}

type fakeMachine struct {
	spec     vm.Spec
	mu       sync.Mutex
	execs    []vm.ExecRequest
	fsCalls  []fsCall
	fsErr    error
	execFn   func(vm.ExecRequest) (vm.ExecResult, error)
	fsFn     func(op string, req map[string]any) (json.RawMessage, error)
	readErr  error         // a streamed read fails with it after the file's bytes
	closed   chan struct{} // when set, receives one value as a streamed read's body closes
	done     chan struct{}
	stopOnce sync.Once
	prestart []string                         // the interpreters Prestart was asked for
	procs    *fakeProcs                       // its processes (process_fake_test.go)
	dialFn   func(port int) (net.Conn, error) // its guest ports (expose_test.go); nil: the agent predates them
}

var _ vm.Prestarter = (*fakeMachine)(nil)

func (m *fakeMachine) Prestart(_ context.Context, argv0 string) error {
	m.mu.Lock()
	m.prestart = append(m.prestart, argv0)
	m.mu.Unlock()
	return nil
}

func (m *fakeMachine) Exec(ctx context.Context, req vm.ExecRequest) (vm.ExecResult, error) {
	m.mu.Lock()
	m.execs = append(m.execs, req)
	fn := m.execFn
	m.mu.Unlock()
	if fn != nil {
		return fn(req)
	}
	zero := 0
	return vm.ExecResult{Stdout: []byte("ok\n"), ExitCode: &zero, Duration: 7 * time.Millisecond}, nil
}

func (m *fakeMachine) FS(_ context.Context, op string, req json.RawMessage) (json.RawMessage, error) {
	var body map[string]any
	if err := json.Unmarshal(req, &body); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fsCalls = append(m.fsCalls, fsCall{op, body})
	if m.fsErr != nil {
		return nil, m.fsErr
	}
	if m.fsFn != nil {
		return m.fsFn(op, body)
	}
	return json.RawMessage(`{"ok":true}`), nil
}

func (m *fakeMachine) KernelRelease() string { return "6.1.0-fake" }
func (m *fakeMachine) PIDs() []int           { return nil }
func (m *fakeMachine) Done() <-chan struct{} { return m.done }
func (m *fakeMachine) Stop(context.Context) error {
	m.stopOnce.Do(func() { close(m.done) })
	return nil
}

// fakeImages resolves every image to a directory named after it, or fails as told.
type fakeImages struct{ err error }

func (f fakeImages) Resolve(_ context.Context, name, _ string, autoInstall bool) (string, error) {
	if f.err != nil {
		if errors.Is(f.err, ErrNotCached) && autoInstall {
			return "", errors.New("pull: connection refused")
		}
		return "", f.err
	}
	return "/cache/" + name, nil
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type harness struct {
	svc   *Service
	drv   *fakeDriver
	clock *clock
}

func newHarness(t *testing.T, mutate func(*settings.Settings), images Images) *harness {
	t.Helper()
	st := settings.Defaults()
	st.ImageAllowlist = []string{"python", "node"}
	if mutate != nil {
		mutate(&st)
	}
	if images == nil {
		images = fakeImages{}
	}
	h := &harness{drv: &fakeDriver{}, clock: &clock{t: time.Unix(1_700_000_000, 0)}}
	h.svc = New(Options{Settings: st, Driver: h.drv, Images: images, Version: "9.9.9", StateDir: t.TempDir(), Now: h.clock.Now})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.svc.Shutdown(ctx)
	})
	return h
}

func (h *harness) call(t *testing.T, op, body string) (map[string]any, *scode.Error) {
	t.Helper()
	fn, ok := h.svc.Handlers()[op]
	if !ok {
		t.Fatalf("no handler %s", op)
	}
	reply, err := fn(context.Background(), json.RawMessage(body))
	if err != nil {
		e, ok := scode.As(err)
		if !ok {
			t.Fatalf("%s: error is not an S-code envelope: %v", op, err)
		}
		return nil, e
	}
	b, err := json.Marshal(reply)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m, nil
}

func (h *harness) mustCall(t *testing.T, op, body string) map[string]any {
	t.Helper()
	m, e := h.call(t, op, body)
	if e != nil {
		t.Fatalf("%s %s: %s", op, body, e.Error())
	}
	return m
}

func (h *harness) create(t *testing.T, body string) string {
	t.Helper()
	return h.mustCall(t, "create", body)["sandbox_id"].(string)
}

func (h *harness) inflight(t *testing.T, id string) float64 {
	t.Helper()
	for _, r := range h.mustCall(t, "list", `{}`)["sandboxes"].([]any) {
		if row := r.(map[string]any); row["sandbox_id"] == id {
			return row["exec_in_flight"].(float64)
		}
	}
	return -1
}

func wantCode(t *testing.T, e *scode.Error, code, msgPart string) {
	t.Helper()
	if e == nil {
		t.Fatalf("want %s, got success", code)
	}
	if e.Code != code || !strings.Contains(e.Message, msgPart) {
		t.Fatalf("want %s containing %q, got %s: %s", code, msgPart, e.Code, e.Message)
	}
	if e.DocsURL != "https://iii.dev/docs/using-iii/sandboxes#"+strings.ToLower(code) {
		t.Fatalf("docs_url %s", e.DocsURL)
	}
}

func TestInfoAndCatalog(t *testing.T) {
	h := newHarness(t, func(s *settings.Settings) {
		s.CustomImages = map[string]string{"zeta": "example.com/z:1", "alpha": "example.com/a:1"}
	}, nil)
	info := h.mustCall(t, "adapter::info", `{}`)
	if info["adapter"] != "sandbox-libkrun" || info["adapter_version"] != "9.9.9" {
		t.Fatalf("info %v", info)
	}
	if c := info["contract"].(map[string]any); c["major"] != 1.0 || c["minor"] != 4.0 {
		t.Fatalf("contract %v", c)
	}
	imgs := h.mustCall(t, "catalog::list", `{}`)["images"].([]any)
	var got []string
	for _, i := range imgs {
		m := i.(map[string]any)
		got = append(got, m["name"].(string)+"/"+m["kind"].(string))
	}
	if strings.Join(got, " ") != "python/preset node/preset alpha/custom zeta/custom" {
		t.Fatalf("catalog order %v", got)
	}
}

func TestCreateChecksInOrder(t *testing.T) {
	h := newHarness(t, func(s *settings.Settings) {
		s.MaxConcurrentSandboxes = 1
		s.CustomImages = map[string]string{"tools": "example.com/tools:1"}
		s.PerImageCaps = map[string]settings.ImageCaps{"python": {MaxCPUs: 2, MaxMemoryMB: 1024}}
	}, nil)
	_, e := h.call(t, "create", `{}`)
	wantCode(t, e, scode.S001, "image is required")
	_, e = h.call(t, "create", `null`)
	wantCode(t, e, scode.S001, "must be a JSON object")
	_, e = h.call(t, "create", `{"image":"python","cpus":-1}`)
	wantCode(t, e, scode.S001, "cpus")
	_, e = h.call(t, "create", `{"image":"tools"}`)
	wantCode(t, e, scode.S100, "image 'tools' is in the catalog but not in image_allowlist")
	_, e = h.call(t, "create", `{"image":"docker.io/library/alpine"}`)
	wantCode(t, e, scode.S100, "valid presets are 'python' and 'node'")
	_, e = h.call(t, "create", `{"image":"python","cpus":3}`)
	wantCode(t, e, scode.S400, "cpus=3 exceeds per-image cap 2")
	_, e = h.call(t, "create", `{"image":"python","memory_mb":2048}`)
	wantCode(t, e, scode.S400, "memory_mb=2048 exceeds per-image cap 1024")
	_, e = h.call(t, "create", `{"image":"python","env":{"1BAD":"x"}}`)
	wantCode(t, e, scode.S001, `"1BAD"`)

	reply := h.mustCall(t, "create", `{"image":"python","name":"one","env":{"B":"2","A":"1","URL":"ws://127.0.0.1:49134/x"},"network":true}`)
	if reply["image"] != "python" || !uuidRe.MatchString(reply["sandbox_id"].(string)) {
		t.Fatalf("create reply %v", reply)
	}
	spec := h.drv.specs[0]
	if spec.RootFS != "/cache/python" || spec.CPUs != 1 || spec.MemoryMB != 512 || !spec.Network ||
		strings.Join(spec.Env, ",") != "A=1,B=2,URL=ws://10.0.2.2:49134/x" {
		t.Fatalf("spec %+v", spec)
	}
	// The limit is checked before the catalog: a second create of an unknown image is S400.
	_, e = h.call(t, "create", `{"image":"nope"}`)
	wantCode(t, e, scode.S400, "max_concurrent_sandboxes (1) reached")
}

func TestAllowlistFailsClosed(t *testing.T) {
	h := newHarness(t, func(s *settings.Settings) { s.ImageAllowlist = nil }, nil)
	_, e := h.call(t, "create", `{"image":"python"}`)
	wantCode(t, e, scode.S100, "image 'python'")
	if e.Type != "config" || e.Retryable {
		t.Fatalf("S100 envelope %+v", e)
	}
}

func TestCreateImageAndBootFailures(t *testing.T) {
	h := newHarness(t, func(s *settings.Settings) { s.AutoInstall = false }, fakeImages{err: fmt.Errorf("no rootfs: %w", ErrNotCached)})
	_, e := h.call(t, "create", `{"image":"node"}`)
	wantCode(t, e, scode.S101, "rootfs missing on disk for image 'node'")

	h = newHarness(t, nil, fakeImages{err: fmt.Errorf("no rootfs: %w", ErrNotCached)})
	_, e = h.call(t, "create", `{"image":"node"}`)
	wantCode(t, e, scode.S102, "auto-install failed for image 'node': pull: connection refused")
	if !e.Retryable || e.Type != "transient" {
		t.Fatalf("S102 envelope %+v", e)
	}

	h = newHarness(t, nil, nil)
	h.drv.bootErr = errors.New("qemu exited: " + strings.Repeat("x", 10000) + "Kernel panic")
	_, e = h.call(t, "create", `{"image":"python"}`)
	wantCode(t, e, scode.S300, "VM boot failed: …")
	if !strings.HasSuffix(e.Message, "Kernel panic") || len(e.Message) > bootErrorTail+64 {
		t.Fatalf("S300 tail: %d bytes", len(e.Message))
	}
	// A driver's *vm.BootError is read by type: its detail follows the prefix once.
	h.drv.bootErr = fmt.Errorf("boot: %w", &vm.BootError{Detail: "memory_mb 64 is below the 128 MiB minimum"})
	_, e = h.call(t, "create", `{"image":"python"}`)
	if e == nil || e.Message != "VM boot failed: memory_mb 64 is below the 128 MiB minimum" {
		t.Fatalf("S300 from a BootError: %+v", e)
	}
	// A failed boot gives its slot back.
	h.drv.bootErr = nil
	h.create(t, `{"image":"python"}`)
}

func TestExecShapes(t *testing.T) {
	h := newHarness(t, nil, nil)
	id := h.create(t, `{"image":"python","env":["BASE=1"]}`)
	m := h.drv.machines[0]
	cases := []struct {
		body string
		argv string
	}{
		{`{"cmd":"python3","args":["-c","print(1)"]}`, "python3|-c|print(1)"},
		{`{"cmd":"sh -c 'echo \"a b\"'"}`, `sh|-c|echo "a b"`},
		{`{"argv":["ls","-l"]}`, "ls|-l"},
	}
	for _, c := range cases {
		body := strings.Replace(c.body, "{", `{"sandbox_id":"`+id+`",`, 1)
		reply := h.mustCall(t, "exec", body)
		if reply["stdout"] != "ok\n" || reply["success"] != true || reply["exit_code"] != 0.0 ||
			reply["stdout_truncated"] != false || reply["stderr_truncated"] != false || reply["duration_ms"] != 7.0 {
			t.Fatalf("exec reply %v", reply)
		}
		last := m.execs[len(m.execs)-1]
		if got := strings.Join(last.Argv, "|"); got != c.argv {
			t.Fatalf("%s: argv %q, want %q", c.body, got, c.argv)
		}
		if last.OutputCap != OutputCap || last.Timeout != DefaultExecTimeout {
			t.Fatalf("cap/timeout %+v", last)
		}
	}
	bad := []struct{ body, msg string }{
		{`{"sandbox_id":"` + id + `","argv":["ls"],"cmd":"ls"}`, "`argv` cannot be combined with `cmd` or `args`. Pick one shape."},
		{`{"sandbox_id":"` + id + `","cmd":"ls -l","args":["x"]}`, "cmd contains whitespace (shell-line shape) AND `args` is set; that is ambiguous."},
		{`{"sandbox_id":"` + id + `","cmd":"echo 'oops"}`, "cmd has unbalanced quotes and cannot be shlex-split"},
		{`{"sandbox_id":"` + id + `"}`, "cmd is required and must be non-empty (or pass `argv` with at least one element)"},
		{`{"sandbox_id":"not-a-uuid","cmd":"ls"}`, "sandbox_id is not a valid UUID: not-a-uuid"},
		{`{"sandbox_id":"` + id + `","cmd":"cat","stdin":"%%%"}`, "stdin must be base64"},
		{`{"sandbox_id":"` + id + `","cmd":"env","env":{"ok":"1","bad-name":"2"}}`, `"bad-name"`},
		{`{"sandbox_id":"` + id + `","cmd":"ls","timeout_ms":"soon"}`, "field `timeout_ms`"},
	}
	for _, b := range bad {
		_, e := h.call(t, "exec", b.body)
		wantCode(t, e, scode.S001, b.msg)
		if !strings.HasPrefix(e.Message, "invalid request: ") {
			t.Fatalf("S001 message %q", e.Message)
		}
	}
	h.mustCall(t, "exec", `{"sandbox_id":"`+id+`","cmd":"cat","stdin":"aGk=","env":{"Z":"1","A":"2"},"workdir":"/srv","timeout_ms":999999999}`)
	last := m.execs[len(m.execs)-1]
	if string(last.Stdin) != "hi" || strings.Join(last.Env, ",") != "A=2,Z=1" || last.Workdir != "/srv" ||
		last.Timeout != 300*time.Second {
		t.Fatalf("exec request %+v", last)
	}
}

func TestExecAdmission(t *testing.T) {
	h := newHarness(t, func(s *settings.Settings) { s.MaxConcurrentExecPerSandbox = 2 }, nil)
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	h.drv.execFn = func(vm.ExecRequest) (vm.ExecResult, error) {
		started <- struct{}{}
		<-release
		zero := 0
		return vm.ExecResult{ExitCode: &zero}, nil
	}
	id := h.create(t, `{"image":"python"}`)
	_, e := h.call(t, "exec", `{"sandbox_id":"00000000-0000-4000-8000-000000000000","cmd":"ls"}`)
	wantCode(t, e, scode.S002, "sandbox not found: 00000000-0000-4000-8000-000000000000")

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.mustCall(t, "exec", `{"sandbox_id":"`+id+`","cmd":"sleep"}`)
		}()
	}
	<-started
	<-started
	_, e = h.call(t, "exec", `{"sandbox_id":"`+id+`","cmd":"ls"}`)
	wantCode(t, e, scode.S003, "sandbox "+id+" is at its exec concurrency cap (max_concurrent_exec_per_sandbox)")
	rows := h.mustCall(t, "list", `{}`)["sandboxes"].([]any)
	row := rows[0].(map[string]any)
	if row["exec_in_flight"] != 2.0 || row["exec_slots_free"] != 0.0 || row["exec_in_progress"] != true {
		t.Fatalf("list row %v", row)
	}
	close(release)
	wg.Wait()

	reply := h.mustCall(t, "stop", `{"sandbox_id":"`+id+`","wait":true}`)
	if reply["stopped"] != true || reply["sandbox_id"] != id {
		t.Fatalf("stop reply %v", reply)
	}
	h.mustCall(t, "stop", `{"sandbox_id":"`+id+`"}`)
	_, e = h.call(t, "exec", `{"sandbox_id":"`+id+`","cmd":"ls"}`)
	wantCode(t, e, scode.S004, "sandbox already stopped: "+id)
	_, e = h.call(t, "stop", `{"sandbox_id":"00000000-0000-4000-8000-000000000001"}`)
	wantCode(t, e, scode.S002, "sandbox not found")
}

func TestExecZeroCapMeansOne(t *testing.T) {
	st, warnings, err := settings.ParseJSON([]byte(`{"max_concurrent_exec_per_sandbox":0}`))
	if err != nil || st.MaxConcurrentExecPerSandbox != 1 || len(warnings) == 0 || !strings.Contains(warnings[0], "means 1") {
		t.Fatalf("settings %+v %v %v", st, warnings, err)
	}
}

func TestTruncationAndTimeout(t *testing.T) {
	h := newHarness(t, func(s *settings.Settings) { s.MaxExecTimeoutMS = 1000 }, nil)
	big := []byte(strings.Repeat("a", OutputCap+10))
	h.drv.execFn = func(req vm.ExecRequest) (vm.ExecResult, error) {
		if req.Argv[0] == "slow" {
			return vm.ExecResult{TimedOut: true, Duration: req.Timeout}, nil
		}
		one := 1
		return vm.ExecResult{Stdout: big, Stderr: []byte("e"), StderrTruncated: false, ExitCode: &one}, nil
	}
	id := h.create(t, `{"image":"python"}`)
	r := h.mustCall(t, "exec", `{"sandbox_id":"`+id+`","cmd":"yes"}`)
	if len(r["stdout"].(string)) != OutputCap || r["stdout_truncated"] != true || r["stderr_truncated"] != false ||
		r["success"] != false || r["exit_code"] != 1.0 {
		t.Fatalf("truncated reply: len %d %v %v", len(r["stdout"].(string)), r["stdout_truncated"], r["exit_code"])
	}
	r = h.mustCall(t, "exec", `{"sandbox_id":"`+id+`","cmd":"slow","timeout_ms":5000}`)
	if r["timed_out"] != true || r["exit_code"] != nil || r["success"] != false || r["duration_ms"] != 1000.0 {
		t.Fatalf("timeout reply %v", r)
	}
}

func TestRun(t *testing.T) {
	h := newHarness(t, nil, nil)
	r := h.mustCall(t, "run", `{"image":"python","lang":"py","code":"print(1)","files":[{"path":"/tmp/lib.py","content":"x=1"}],"env":{"K":"v"}}`)
	if r["stdout"] != "ok\n" || r["stdout_truncated"] != false {
		t.Fatalf("run reply %v", r)
	}
	if _, ok := r["sandbox_id"]; ok {
		t.Fatalf("sandbox_id without keep_sandbox: %v", r)
	}
	m := h.drv.machines[0]
	if len(m.fsCalls) != 2 || m.fsCalls[0].req["path"] != "/tmp/lib.py" || m.fsCalls[1].req["path"] != "/tmp/run.py" ||
		m.fsCalls[1].req["content"] != "print(1)" || m.fsCalls[1].req["parents"] != true {
		t.Fatalf("fs calls %+v", m.fsCalls)
	}
	if got := strings.Join(m.execs[0].Argv, " "); got != "python3 /tmp/run.py" {
		t.Fatalf("argv %q", got)
	}
	if h.drv.specs[0].CPUs != 1 || strings.Join(h.drv.specs[0].Env, ",") != "K=v" {
		t.Fatalf("run spec %+v", h.drv.specs[0])
	}
	<-m.Done()

	for lang, want := range map[string]string{"node": "node /tmp/run.js", "sh": "/bin/sh /tmp/run.sh", "/usr/bin/ruby": "/usr/bin/ruby /tmp/run.txt"} {
		r = h.mustCall(t, "run", `{"image":"node","lang":"`+lang+`","code":"x","keep_sandbox":true}`)
		id, _ := r["sandbox_id"].(string)
		if !uuidRe.MatchString(id) {
			t.Fatalf("keep_sandbox reply %v", r)
		}
		last := h.drv.machines[len(h.drv.machines)-1]
		if got := strings.Join(last.execs[0].Argv, " "); got != want {
			t.Fatalf("lang %s: argv %q", lang, got)
		}
		h.mustCall(t, "stop", `{"sandbox_id":"`+id+`"}`)
	}

	_, e := h.call(t, "run", `{"image":"python","code":"print(1)"}`)
	wantCode(t, e, scode.S001, "lang is required")
	_, e = h.call(t, "run", `{"image":"ghost","lang":"python","code":"1"}`)
	wantCode(t, e, scode.S100, "during sandbox::run step `create` (sandbox_id=): image 'ghost'")
	var fix map[string]any
	if err := json.Unmarshal(e.Fix, &fix); err != nil || fix["context"] != "create" || fix["inner_code"] != "S100" {
		t.Fatalf("fix %s", e.Fix)
	}
}

func TestRunStepFailureStopsSandbox(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.drv.execFn = func(vm.ExecRequest) (vm.ExecResult, error) { return vm.ExecResult{}, nil }
	// The fs error is injected on the machine as it boots.
	d := &failingFSDriver{fakeDriver: h.drv, err: &vm.FSError{Code: "S211", Message: "parent directory not found: /nope/x", Fix: json.RawMessage(`{"parents":true}`)}}
	h.svc.opt.Driver = d
	_, e := h.call(t, "run", `{"image":"python","lang":"python","code":"1","files":[{"path":"/nope/x","content":"y"}]}`)
	wantCode(t, e, scode.S211, "during sandbox::run step `fs::write (sibling file)` (sandbox_id=")
	if !strings.HasSuffix(e.Message, "): parent directory not found: /nope/x") {
		t.Fatalf("message %q", e.Message)
	}
	var fix map[string]any
	if err := json.Unmarshal(e.Fix, &fix); err != nil || fix["inner_code"] != "S211" || fix["sandbox_id"] == "" {
		t.Fatalf("fix %s", e.Fix)
	}
	select {
	case <-h.drv.machines[0].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the failed run's sandbox was not stopped")
	}
}

type failingFSDriver struct {
	*fakeDriver
	err error
}

func (d *failingFSDriver) Boot(ctx context.Context, spec vm.Spec) (vm.Machine, error) {
	m, err := d.fakeDriver.Boot(ctx, spec)
	if err == nil {
		m.(*fakeMachine).fsErr = d.err
	}
	return m, err
}

func TestFSForwarding(t *testing.T) {
	h := newHarness(t, nil, nil)
	id := h.create(t, `{"image":"python"}`)
	for _, op := range FSOps {
		body := `{"sandbox_id":"` + id + `","path":"/tmp"}`
		switch op {
		case "write":
			body = `{"sandbox_id":"` + id + `","path":"/tmp","content":"x"}`
		case "read":
			continue // its reply is a channel; see TestFSReadWriteChannels
		}
		r := h.mustCall(t, "fs::"+op, body)
		if r["ok"] != true {
			t.Fatalf("fs::%s reply %v", op, r)
		}
	}
	m := h.drv.machines[0]
	if len(m.fsCalls) != len(FSOps)-1 || m.fsCalls[0].op != "ls" || m.fsCalls[0].req["sandbox_id"] != nil || m.fsCalls[0].req["path"] != "/tmp" {
		t.Fatalf("fs calls %+v", m.fsCalls)
	}
	m.fsErr = &vm.FSError{Code: "S213", Message: "already exists: /tmp"}
	_, e := h.call(t, "fs::mkdir", `{"sandbox_id":"`+id+`","path":"/tmp"}`)
	wantCode(t, e, scode.S213, "already exists: /tmp")
	_, e = h.call(t, "fs::ls", `{"path":"/"}`)
	wantCode(t, e, scode.S001, "sandbox_id is required")
	_, e = h.call(t, "fs::ls", `{"sandbox_id":"x","path":"/"}`)
	wantCode(t, e, scode.S001, "sandbox_id is not a valid UUID: x")
}

func TestReaper(t *testing.T) {
	h := newHarness(t, func(s *settings.Settings) { s.DefaultIdleTimeoutSecs = 60; s.MaxExecTimeoutMS = 10000 }, nil)
	release := make(chan struct{})
	h.drv.execFn = func(req vm.ExecRequest) (vm.ExecResult, error) {
		if req.Argv[0] == "block" {
			<-release
		}
		return vm.ExecResult{}, nil
	}
	idle := h.create(t, `{"image":"python"}`)
	long := h.create(t, `{"image":"python","idle_timeout_secs":600}`)
	busy := h.create(t, `{"image":"python"}`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.mustCall(t, "exec", `{"sandbox_id":"`+busy+`","cmd":"block"}`)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for h.inflight(t, busy) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the blocking exec never started")
		}
		runtime.Gosched()
	}
	stopped := func() map[string]bool {
		out := map[string]bool{}
		for _, r := range h.mustCall(t, "list", `{}`)["sandboxes"].([]any) {
			row := r.(map[string]any)
			out[row["sandbox_id"].(string)] = row["stopped"].(bool)
		}
		return out
	}
	h.clock.Add(59 * time.Second)
	h.mustCall(t, "fs::stat", `{"sandbox_id":"`+idle+`","path":"/"}`) // activity resets the clock
	h.clock.Add(59 * time.Second)
	h.svc.Reap()
	if s := stopped(); s[idle] || s[long] || s[busy] {
		t.Fatalf("reaped too early: %v", s)
	}
	h.clock.Add(2 * time.Second)
	h.svc.Reap()
	if s := stopped(); !s[idle] || s[long] || s[busy] {
		t.Fatalf("after 61 s idle: %v", s)
	}
	_, e := h.call(t, "exec", `{"sandbox_id":"`+idle+`","cmd":"ls"}`)
	wantCode(t, e, scode.S004, idle)
	// busy: protected until idle (60 s) + max exec (10 s) + 60 s since its exec started.
	h.clock.Add(8 * time.Second)
	h.svc.Reap()
	if s := stopped(); s[busy] {
		t.Fatalf("busy sandbox reaped at 128 s: %v", s)
	}
	h.clock.Add(3 * time.Second)
	h.svc.Reap()
	if s := stopped(); !s[busy] || s[long] {
		t.Fatalf("busy sandbox not reclaimed at 131 s: %v", s)
	}
	close(release)
	<-done
	h.clock.Add(10 * time.Minute)
	h.svc.Reap()
	if s := stopped(); !s[long] {
		t.Fatalf("per-sandbox idle override not honoured: %v", s)
	}
	h.clock.Add(2 * time.Hour)
	h.svc.Reap()
	if rows := h.mustCall(t, "list", `{}`)["sandboxes"].([]any); len(rows) != 0 {
		t.Fatalf("stopped sandboxes still listed after an hour: %v", rows)
	}
}

func TestListRejectsNull(t *testing.T) {
	h := newHarness(t, nil, nil)
	_, e := h.call(t, "list", `null`)
	wantCode(t, e, scode.S001, "JSON object")
	if r := h.mustCall(t, "list", `{}`); len(r["sandboxes"].([]any)) != 0 {
		t.Fatalf("list %v", r)
	}
}

// A field the request does not have is refused S001 naming it, never ignored: a misspelt
// `network` would otherwise create a sandbox with the network on.
func TestUnknownFieldsRefused(t *testing.T) {
	h := newHarness(t, nil, nil)
	for _, c := range []struct{ op, body, field string }{
		{"create", `{"image":"python","netwrok":false}`, `"netwrok"`},
		{"run", `{"image":"python","lang":"py","code":"print(1)","cpus":8}`, `"cpus"`},
		{"exec", `{"sandbox_id":"0d6f8c1e-3a1b-4c55-9a4e-0d2f7a1b9c10","cmd":"ls","truncate":true}`, `"truncate"`},
		{"stop", `{"sandbox_id":"0d6f8c1e-3a1b-4c55-9a4e-0d2f7a1b9c10","force":true}`, `"force"`},
		{"list", `{"whatever":1}`, `"whatever"`},
	} {
		_, e := h.call(t, c.op, c.body)
		wantCode(t, e, scode.S001, "unknown field "+c.field)
	}
	if n := len(h.drv.specs); n != 0 {
		t.Fatalf("%d machines booted for refused requests", n)
	}
}

func TestShutdownStopsEveryMachine(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.create(t, `{"image":"python"}`)
	h.create(t, `{"image":"node"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h.svc.Shutdown(ctx)
	for i, m := range h.drv.machines {
		select {
		case <-m.Done():
		default:
			t.Fatalf("machine %d still running after Shutdown", i)
		}
	}
}

func TestShlex(t *testing.T) {
	cases := map[string]string{
		`a b  c`:              "a|b|c",
		`a 'b c' "d \"e\""`:   `a|b c|d "e"`,
		`a\ b`:                "a b",
		`x "" y`:              "x||y",
		`py -c 'print("hi")'`: `py|-c|print("hi")`,
	}
	for in, want := range cases {
		got, err := shlexSplit(in)
		if err != nil || strings.Join(got, "|") != want {
			t.Fatalf("shlexSplit(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`'a`, `"a`, `a\`} {
		if _, err := shlexSplit(in); err == nil {
			t.Fatalf("shlexSplit(%q) should fail", in)
		}
	}
}
