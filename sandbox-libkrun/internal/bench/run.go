package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/sandbox"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/adapter"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// runCase is one sandbox::run request of the bench, with the largest ratio of its median to the
// floor's that meets the performance target for it.
type runCase struct {
	Label, Lang, Code, Stdout string
	Target                    float64
}

var runCases = []runCase{
	{Label: "shell `true` (sh -c true)", Lang: "shell", Code: "true", Stdout: "", Target: 1.1},
	{Label: "python print(1)", Lang: "python", Code: "print(1)", Stdout: "1\n", Target: 1.2},
}

// stack is an in-process engine with the sandbox router bound to an adapter worker that serves
// the real adapter.Service over the Go SDK, and a client worker calling sandbox::run in default.
type stack struct {
	eng    *core.Engine
	svc    *adapter.Service
	drv    *countingDriver
	client *protocol.Worker
	close  func()
}

// createPython creates a python sandbox on the stack, waiting up to timeout for it, and returns
// its id and the stop that ends it (waiting for its machine).
func (s *stack) createPython(ctx context.Context, timeout time.Duration) (id string, stop func(), err error) {
	raw, err := s.client.Call(ctx, "sandbox::create", map[string]any{"image": "python"}, protocol.WithTimeout(timeout))
	if err != nil {
		return "", nil, fmt.Errorf("sandbox::create: %w", err)
	}
	var created struct {
		SandboxID string `json:"sandbox_id"`
	}
	if err := json.Unmarshal(raw, &created); err != nil {
		return "", nil, err
	}
	stop = func() {
		_, _ = s.client.Call(context.Background(), "sandbox::stop", map[string]any{"sandbox_id": created.SandboxID, "wait": true}, protocol.WithTimeout(time.Minute))
	}
	return created.SandboxID, stop, nil
}

func startStack(ctx context.Context, d *qemu.Driver, st settings.Settings, cache *image.Cache) (*stack, error) {
	ctx, cancel := context.WithCancel(ctx)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	eng := core.New(core.Options{Logger: quiet})
	sandbox.New(eng, &sandbox.Binding{Adapter: adapter.Name, Namespace: protocol.DefaultNamespace, Source: "config"}).Install()
	go func() { _ = eng.Serve(ctx, ln) }()
	url := "ws://" + ln.Addr().String()

	state, err := os.MkdirTemp("", "iii-bench-")
	if err != nil {
		cancel()
		return nil, err
	}
	drv := &countingDriver{Driver: d}
	aw := protocol.NewWorker(protocol.Config{URL: url, Name: adapter.Name, Logger: quiet})
	opt := adapter.Options{Settings: st, Driver: drv, Images: cachedImages{cache}, Version: "bench", StateDir: state,
		Accelerator: d.Accel(), Channels: aw}
	if st.Snapshots == settings.SnapshotsOn {
		opt.Driver = &snapshotDriver{countingDriver: drv, sn: d}
		opt.Snapshots = snapshot.NewStore(filepath.Join(state, "snapshots"), int64(st.SnapshotCacheMB))
		opt.FirmwareID, opt.GuestArch = "bench", d.Arch().Name
	}
	svc := adapter.New(opt)
	for op, h := range svc.Handlers() {
		if err := aw.Register(adapter.Name+"::"+op, wrap(h)); err != nil {
			cancel()
			return nil, err
		}
	}
	client := protocol.NewWorker(protocol.Config{URL: url, Name: "bench-client", Logger: quiet})
	s := &stack{eng: eng, svc: svc, drv: drv, client: client}
	s.close = func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		svc.Shutdown(sctx)
		client.Close()
		aw.Close()
		cancel()
		os.RemoveAll(state)
	}
	for _, w := range []*protocol.Worker{aw, client} {
		if err := w.Start(ctx); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// wrap turns an S-code error into the wire error, as the adapter binary does.
func wrap(h adapter.Handler) protocol.Handler {
	return func(ctx context.Context, in json.RawMessage) (any, error) {
		out, err := h(ctx, in)
		if e, ok := scode.As(err); ok {
			return nil, protocol.RawError(e.JSON())
		}
		return out, err
	}
}

// run calls sandbox::run once and checks its reply.
func (s *stack) run(ctx context.Context, c runCase) (time.Duration, error) {
	body := map[string]any{"image": "python", "lang": c.Lang, "code": c.Code}
	t0 := time.Now()
	raw, err := s.client.Call(ctx, "sandbox::run", body, protocol.WithTimeout(2*time.Minute))
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("sandbox::run %s: %w", c.Label, err)
	}
	var reply struct {
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
		Success bool   `json:"success"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil || !reply.Success || reply.Stdout != c.Stdout {
		return 0, fmt.Errorf("sandbox::run %s: unexpected reply %s", c.Label, raw)
	}
	return d, nil
}

// settle waits until the previous run's machine is gone and, with a pool, the pool is full
// again, so that every timed run starts on a quiet host.
func (s *stack) settle(ctx context.Context, pool int) error {
	for ctx.Err() == nil {
		ready := 0
		if info, _ := s.svc.Info(ctx, nil); info != nil {
			for _, st := range info.(adapter.InfoReply).WarmPool {
				ready += st.Ready
			}
		}
		if s.drv.live() == pool && ready == pool {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

// measureRuns times n sandbox::run calls of each case end to end from the client, with a warm
// pool of pool python machines (0: every run boots its own), images from cache. Cold runs
// (pool 0) also return each case's phases. With snaps, cold runs are restored from the image's
// snapshot, made (and not timed) by a first run.
func measureRuns(ctx context.Context, d *qemu.Driver, n, pool int, cache *image.Cache, snaps bool) ([]Stats, []Breakdown, error) {
	st := settings.Defaults()
	st.AutoInstall = false
	st.ImageAllowlist = []string{"python"}
	if pool > 0 {
		st.WarmPool = map[string]uint32{"python": uint32(pool)}
	}
	// Snapshots are on by default: the runs without them must turn them off, or their first
	// run would make a snapshot that the later ones restore.
	st.Snapshots = settings.SnapshotsOff
	if snaps {
		st.Snapshots = settings.SnapshotsOn
	}
	s, err := startStack(ctx, d, st, cache)
	if err != nil {
		return nil, nil, err
	}
	defer s.close()
	if snaps {
		if err := s.makeSnapshot(ctx); err != nil {
			return nil, nil, err
		}
	}
	var out []Stats
	var phases []Breakdown
	for _, c := range runCases {
		var ds []time.Duration
		var b Breakdown
		for i := 0; i < n; i++ {
			if err := s.settle(ctx, pool); err != nil {
				return nil, nil, err
			}
			t0 := time.Now()
			dur, err := s.run(ctx, c)
			if err != nil {
				return nil, nil, err
			}
			ds = append(ds, dur)
			if rt := s.drv.lastRun(); pool == 0 && rt != nil && rt.bootCalled.After(t0) {
				b.Add(runPhases(t0, dur, rt))
			}
		}
		out = append(out, summarize(ds))
		phases = append(phases, b)
	}
	return out, phases, nil
}

// makeSnapshot runs one sandbox (which boots) and waits until the adapter has made the image's
// snapshot behind it.
func (s *stack) makeSnapshot(ctx context.Context) error {
	if _, err := s.run(ctx, runCases[0]); err != nil {
		return err
	}
	for ctx.Err() == nil {
		info, _ := s.svc.Info(ctx, nil)
		if st := info.(adapter.InfoReply).Snapshots; st != nil && st.Making == 0 {
			if st.Made == 0 {
				return fmt.Errorf("no snapshot made: %s", st.LastError)
			}
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

// snapshotDriver is a countingDriver that also saves and restores machines; restored machines
// count as live.
type snapshotDriver struct {
	*countingDriver
	sn vm.Snapshotter
}

func (d *snapshotDriver) Snapshot(ctx context.Context, spec vm.Spec, dst vm.SnapshotFiles, warm func(context.Context, vm.Machine) error) (vm.SnapshotInfo, error) {
	return d.sn.Snapshot(ctx, spec, dst, warm)
}

func (d *snapshotDriver) Restore(ctx context.Context, spec vm.Spec, src vm.SnapshotFiles, release string) (vm.Machine, error) {
	m, err := d.sn.Restore(ctx, spec, src, release)
	if err == nil {
		d.mu.Lock()
		d.machines = append(d.machines, m)
		d.mu.Unlock()
	}
	return m, err
}

// cachedImages resolves images from the cache only.
type cachedImages struct{ c *image.Cache }

// Resolve returns the cached root filesystem of ref.
func (ci cachedImages) Resolve(_ context.Context, _, ref string, _ bool) (string, error) {
	if p, ok := ci.c.RootFS(ref); ok {
		return p, nil
	}
	return "", adapter.ErrNotCached
}

// countingDriver counts the machines that have not exited yet and times each machine's boot,
// file operations and execs.
type countingDriver struct {
	vm.Driver
	mu       sync.Mutex
	machines []vm.Machine
	last     *runTimes // the times of the machine booted last
}

// Boot boots through the wrapped driver and remembers the machine.
func (d *countingDriver) Boot(ctx context.Context, spec vm.Spec) (vm.Machine, error) {
	rt := &runTimes{bootCalled: time.Now()}
	m, err := d.Driver.Boot(ctx, spec)
	if err != nil {
		return m, err
	}
	rt.machine = m
	d.mu.Lock()
	d.machines = append(d.machines, m)
	d.last = rt
	d.mu.Unlock()
	return timed(m, &d.mu, rt), nil
}

// lastRun returns the times of the machine booted last (nil before the first).
func (d *countingDriver) lastRun() *runTimes {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		return nil
	}
	rt := *d.last
	return &rt
}

func (d *countingDriver) live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, m := range d.machines {
		select {
		case <-m.Done():
		default:
			n++
		}
	}
	return n
}

// verdict compares a run's median (and p90) with the floor's median and with target, the
// largest ratio of the medians that meets it.
func verdict(s, floor Stats, target float64) string {
	r, r90 := float64(s.Median)/float64(floor.Median), float64(s.P90)/float64(floor.Median)
	mark := fmt.Sprintf("meets the target (<= %.2fx)", target)
	if r > target {
		mark = fmt.Sprintf("MISSES the target (<= %.2fx)", target)
	}
	return fmt.Sprintf("%.2fx floor (p90 %.2fx), overhead %+.0f%%: %s", r, r90, 100*(r-1), mark)
}

// absVerdict compares a run's median with limit, a duration (0: no target).
func absVerdict(s Stats, limit time.Duration) string {
	switch {
	case limit == 0:
		return "no target"
	case s.Median > limit:
		return fmt.Sprintf("MISSES the target (<= %s)", limit)
	}
	return fmt.Sprintf("meets the target (<= %s)", limit)
}

func pad(s string, n int) string { return s + strings.Repeat(" ", max(0, n-len([]rune(s)))) }
