package adapter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

func withPool(more func(*settings.Settings)) func(*settings.Settings) {
	return func(s *settings.Settings) {
		s.WarmPool = map[string]uint32{"python": 1}
		if more != nil {
			more(s)
		}
	}
}

// boots returns a copy of the specs booted so far and their machines.
func (d *fakeDriver) boots() ([]vm.Spec, []*fakeMachine) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]vm.Spec(nil), d.specs...), append([]*fakeMachine(nil), d.machines...)
}

func (m *fakeMachine) calls() []vm.ExecRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]vm.ExecRequest(nil), m.execs...)
}

// newHarnessWith is newHarness on a driver prepared before the service (and its pool) starts.
func newHarnessWith(t *testing.T, drv *fakeDriver, mutate func(*settings.Settings)) *harness {
	t.Helper()
	st := settings.Defaults()
	st.ImageAllowlist = []string{"python", "node"}
	mutate(&st)
	h := &harness{drv: drv, clock: &clock{t: time.Unix(1_700_000_000, 0)}}
	h.svc = New(Options{Settings: st, Driver: drv, Images: fakeImages{}, StateDir: t.TempDir(), Now: h.clock.Now})
	t.Cleanup(func() { h.svc.Shutdown(context.Background()) })
	return h
}

func poolStatus(t *testing.T, h *harness, image string) map[string]any {
	t.Helper()
	pools, _ := h.mustCall(t, "adapter::info", `{}`)["warm_pool"].(map[string]any)
	st, _ := pools[image].(map[string]any)
	if st == nil {
		t.Fatalf("adapter::info has no warm_pool.%s: %v", image, pools)
	}
	return st
}

func TestWarmPoolServesMatchingCreates(t *testing.T) {
	h := newHarness(t, withPool(nil), nil)
	id := h.create(t, `{"image":"python","name":"w","env":{"A":"1"}}`)
	specs, machines := h.drv.boots()
	if len(specs) == 0 || specs[0].Env != nil || specs[0].CPUs != 1 || specs[0].MemoryMB != 512 || specs[0].Network {
		t.Fatalf("pool spec %+v", specs)
	}
	warm := machines[0].calls()
	if len(warm) != 2 || strings.Join(warm[1].Argv, " ") != "python3 -c pass" {
		t.Fatalf("warm-up execs %+v", warm)
	}
	// A file written and removed warms the agent's file code; python3 is prestarted.
	machines[0].mu.Lock()
	fsWarm, prestarted := append([]fsCall(nil), machines[0].fsCalls...), machines[0].prestart
	machines[0].mu.Unlock()
	if len(fsWarm) != 2 || fsWarm[0].op != "write" || fsWarm[1].op != "rm" || fsWarm[0].req["path"] != warmFile || fsWarm[1].req["path"] != warmFile {
		t.Fatalf("warm-up fs calls %+v", fsWarm)
	}
	if strings.Join(prestarted, ",") != "python3" {
		t.Fatalf("prestarted %q, want python3", prestarted)
	}
	h.mustCall(t, "exec", `{"sandbox_id":"`+id+`","argv":["env"],"env":["B=2","A=3"]}`)
	calls := machines[0].calls()
	if got := strings.Join(calls[len(calls)-1].Env, ","); got != "A=1,B=2,A=3" {
		t.Fatalf("exec env %q: create's env must come first, the exec's after", got)
	}
	rows := h.mustCall(t, "list", `{}`)["sandboxes"].([]any)
	if len(rows) != 1 || rows[0].(map[string]any)["sandbox_id"] != id {
		t.Fatalf("pool machines must not be listed: %v", rows)
	}

	// The replacement serves the next matching run; the pool keeps booting behind it.
	reply := h.mustCall(t, "run", `{"image":"python","lang":"python","code":"print(1)"}`)
	if reply["success"] != true {
		t.Fatalf("run %v", reply)
	}
	if st := poolStatus(t, h, "python"); st["served"] != 2.0 || st["size"] != 1.0 {
		t.Fatalf("status %v", st)
	}

	// Other cpus, memory or network boot their own machine with the create's env.
	before, _ := h.drv.boots()
	h.create(t, `{"image":"python","cpus":2,"env":{"A":"1"}}`)
	h.create(t, `{"image":"python","network":true}`)
	h.create(t, `{"image":"node"}`)
	after, _ := h.drv.boots()
	cold := 0
	for _, s := range after[len(before):] {
		if s.CPUs == 2 || s.Network || s.RootFS == "/cache/node" {
			cold++
		}
		if s.CPUs == 2 && strings.Join(s.Env, ",") != "A=1" {
			t.Fatalf("cold spec env %v", s.Env)
		}
	}
	if cold != 3 || poolStatus(t, h, "python")["served"] != 2.0 {
		t.Fatalf("cold boots %d of %+v", cold, after[len(before):])
	}
}

func TestWarmPoolOutsideTheSandboxLimit(t *testing.T) {
	h := newHarness(t, withPool(func(s *settings.Settings) { s.MaxConcurrentSandboxes = 1 }), nil)
	id := h.create(t, `{"image":"python"}`)
	_, e := h.call(t, "create", `{"image":"python"}`)
	wantCode(t, e, scode.S400, "max_concurrent_sandboxes (1) reached")
	h.mustCall(t, "stop", `{"sandbox_id":"`+id+`","wait":true}`)
	h.create(t, `{"image":"python"}`)
	if st := poolStatus(t, h, "python"); st["served"] != 2.0 {
		t.Fatalf("status %v", st)
	}
}

func TestWarmPoolBootFailureFallsBack(t *testing.T) {
	drv := &fakeDriver{bootErr: errors.New("no kvm")}
	h := newHarnessWith(t, drv, withPool(nil))
	_, e := h.call(t, "create", `{"image":"python"}`)
	wantCode(t, e, scode.S300, "no kvm")
	if st := poolStatus(t, h, "python"); st["error"] != "no kvm" || st["served"] != 0.0 {
		t.Fatalf("status %v", st)
	}
	drv.mu.Lock()
	drv.bootErr = nil
	drv.mu.Unlock()
	h.create(t, `{"image":"python"}`)
}

func TestShutdownStopsThePool(t *testing.T) {
	h := newHarness(t, withPool(func(s *settings.Settings) { s.WarmPool["node"] = 2 }), nil)
	h.create(t, `{"image":"python"}`)
	h.svc.Shutdown(t.Context())
	_, machines := h.drv.boots()
	if len(machines) < 3 {
		t.Fatalf("%d machines booted", len(machines))
	}
	for i, m := range machines {
		if !machineDone(m) {
			t.Fatalf("machine %d still running after Shutdown", i)
		}
	}
	if _, ok := h.svc.pool.take(t.Context(), "python"); ok {
		t.Fatal("a stopped pool handed out a machine")
	}
}

func TestWarmPoolCallerGivesUpWhileBooting(t *testing.T) {
	gate := make(chan struct{})
	drv := &fakeDriver{execFn: func(vm.ExecRequest) (vm.ExecResult, error) {
		<-gate
		zero := 0
		return vm.ExecResult{ExitCode: &zero}, nil
	}}
	h := newHarnessWith(t, drv, withPool(nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := h.svc.pool.take(ctx, "python"); ok {
		t.Fatal("a cancelled caller got a machine still warming up")
	}
	if st := poolStatus(t, h, "python"); st["booting"] != 1.0 || st["served"] != 0.0 {
		t.Fatalf("status %v", st)
	}
	close(gate)
	h.create(t, `{"image":"python"}`)
	if st := poolStatus(t, h, "python"); st["served"] != 1.0 {
		t.Fatalf("status %v", st)
	}
	if specs, _ := drv.boots(); len(specs) < 1 || len(specs) > 2 {
		t.Fatalf("%d boots for one create", len(specs))
	}
}
