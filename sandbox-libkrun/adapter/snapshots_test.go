package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// snapDriver is a fakeDriver that also saves and restores machines: a snapshot is a file, a
// restore a fakeMachine (or restoreErr).
type snapDriver struct {
	fakeDriver
	smu        sync.Mutex
	saved      []vm.Spec
	restored   []vm.Spec
	restoreErr error
}

var _ vm.Snapshotter = (*snapDriver)(nil)

func (d *snapDriver) Snapshot(ctx context.Context, spec vm.Spec, dst vm.SnapshotFiles, warm func(context.Context, vm.Machine) error) (vm.SnapshotInfo, error) {
	m, err := d.Boot(ctx, spec)
	if err != nil {
		return vm.SnapshotInfo{}, err
	}
	defer m.Stop(ctx)
	if err := warm(ctx, m); err != nil {
		return vm.SnapshotInfo{}, err
	}
	d.smu.Lock()
	d.saved = append(d.saved, spec)
	d.smu.Unlock()
	if err := os.WriteFile(dst.RAM, []byte("RAM"), 0o600); err != nil {
		return vm.SnapshotInfo{}, err
	}
	return vm.SnapshotInfo{KernelRelease: "6.1.0-fake", Size: 7}, os.WriteFile(dst.Machine, []byte("QEVM"), 0o600)
}

func (d *snapDriver) Restore(_ context.Context, spec vm.Spec, src vm.SnapshotFiles, release string) (vm.Machine, error) {
	d.smu.Lock()
	defer d.smu.Unlock()
	if d.restoreErr != nil {
		return nil, d.restoreErr
	}
	for _, f := range []string{src.Machine, src.RAM} {
		if f == "" {
			continue // a parked machine's stream alone
		}
		if _, err := os.Stat(f); err != nil || release != "6.1.0-fake" {
			return nil, errors.New("no such snapshot")
		}
	}
	d.restored = append(d.restored, spec)
	return &fakeMachine{spec: spec, done: make(chan struct{})}, nil
}

// dirImages resolves every image to one real directory (a root disk is built of it).
type dirImages struct{ dir string }

func (f dirImages) Resolve(context.Context, string, string, bool) (string, error) { return f.dir, nil }

func snapHarness(t *testing.T) (*Service, *snapDriver) {
	t.Helper()
	if _, err := exec.LookPath(snapshot.Mkfs); err != nil {
		t.Skipf("%s (e2fsprogs) is needed to build root disks", snapshot.Mkfs)
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := settings.Defaults()
	st.ImageAllowlist = []string{"python"}
	st.Snapshots = settings.SnapshotsOn
	drv := &snapDriver{}
	svc := New(Options{Settings: st, Driver: drv, Images: dirImages{root}, Version: "9.9.9", StateDir: t.TempDir(),
		Snapshots: snapshot.NewStore(filepath.Join(t.TempDir(), "snapshots"), 100), FirmwareID: "fw", Accelerator: "tcg", GuestArch: "x86_64"})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		svc.Shutdown(ctx)
	})
	return svc, drv
}

func snapInfo(t *testing.T, svc *Service) SnapshotStatus {
	t.Helper()
	r, err := svc.Info(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := r.(InfoReply).Snapshots
	if st == nil {
		t.Fatal("adapter::info has no snapshots with snapshots on")
	}
	return *st
}

func awaitMade(t *testing.T, svc *Service, n uint64) {
	t.Helper()
	if !enginetest.Poll(20*time.Second, func() bool { return snapInfo(t, svc).Made >= n }) {
		t.Fatalf("no snapshot made: %+v", snapInfo(t, svc))
	}
}

// The first cold sandbox boots and has the snapshot made behind it (warmed by the image's
// commands); the next is restored from it with its own host name, and adapter::info lists it.
func TestSnapshotMadeThenRestored(t *testing.T) {
	svc, drv := snapHarness(t)
	ctx := context.Background()
	first, err := svc.create(ctx, CreateRequest{Image: strp("python")})
	if err != nil || first.fromSnapshot {
		t.Fatalf("first create: %v (from snapshot %v)", err, first != nil && first.fromSnapshot)
	}
	awaitMade(t, svc, 1)
	drv.smu.Lock()
	saved := drv.saved[0]
	drv.smu.Unlock()
	if saved.RootDisk == "" || saved.MemoryMB != 512 || saved.ScratchMB != 256 || saved.Network {
		t.Fatalf("snapshot machine: %+v", saved)
	}
	second, err := svc.create(ctx, CreateRequest{Image: strp("python"), Env: json.RawMessage(`{"A":"1"}`)})
	if err != nil || !second.fromSnapshot {
		t.Fatalf("second create: %v (from snapshot %v)", err, second != nil && second.fromSnapshot)
	}
	r := drv.restored[0]
	// The restored machine's disk is a link to the snapshot's in the sandbox's own directory.
	if r.Hostname != hostname(second.id) || !sameFile(r.RootDisk, filepath.Join(snapInfo(t, svc).Last, filepath.Base(saved.RootDisk))) ||
		filepath.Dir(r.RootDisk) != second.stateDir || r.MemoryMB != 512 || len(r.Env) != 1 {
		t.Fatalf("restored spec: %+v", r)
	}
	st := snapInfo(t, svc)
	if st.Restored != 1 || st.Booted != 1 || len(st.Sandboxes) != 1 || st.Sandboxes[0] != second.id {
		t.Fatalf("info: %+v", st)
	}
	// Networking cannot be restored: it boots.
	net, err := svc.create(ctx, CreateRequest{Image: strp("python"), Network: json.RawMessage(`true`)})
	if err != nil || net.fromSnapshot {
		t.Fatalf("network create: %v", err)
	}
}

// A snapshot that fails to restore is discarded and the sandbox booted; the reason is shown.
func TestSnapshotRestoreFailureBoots(t *testing.T) {
	svc, drv := snapHarness(t)
	ctx := context.Background()
	if _, err := svc.create(ctx, CreateRequest{Image: strp("python")}); err != nil {
		t.Fatal(err)
	}
	awaitMade(t, svc, 1)
	drv.smu.Lock()
	drv.restoreErr = &vm.BootError{Detail: "load of migration failed: Invalid argument", Err: errors.New("load")}
	drv.smu.Unlock()
	box, err := svc.create(ctx, CreateRequest{Image: strp("python")})
	if err != nil || box.fromSnapshot {
		t.Fatalf("create: %v", err)
	}
	st := snapInfo(t, svc)
	if st.Fallbacks != 1 || st.Booted != 2 {
		t.Fatalf("info: %+v", st)
	}
	if want := "load of migration failed"; !strings.Contains(st.LastError, want) {
		t.Fatalf("last_error %q lacks %q", st.LastError, want)
	}
}

func strp(s string) *string { return &s }

// sameFile says a and b are the same file (hard links of it).
func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}
func boolp(b bool) *bool { return &b }

// With snapshots on the warm pool refills by restoring: its first machine boots and has the
// snapshot made, the refill after a take is a restore.
func TestPoolRefillsByRestoring(t *testing.T) {
	if _, err := exec.LookPath(snapshot.Mkfs); err != nil {
		t.Skipf("%s (e2fsprogs) is needed to build root disks", snapshot.Mkfs)
	}
	root := t.TempDir()
	st := settings.Defaults()
	st.ImageAllowlist = []string{"python"}
	st.Snapshots = settings.SnapshotsOn
	st.WarmPool = map[string]uint32{"python": 1}
	drv := &snapDriver{}
	svc := New(Options{Settings: st, Driver: drv, Images: dirImages{root}, Version: "9.9.9", StateDir: t.TempDir(),
		Snapshots: snapshot.NewStore(filepath.Join(t.TempDir(), "snapshots"), 100), FirmwareID: "fw"})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		svc.Shutdown(ctx)
	})
	awaitMade(t, svc, 1)
	if _, err := svc.create(context.Background(), CreateRequest{Image: strp("python")}); err != nil {
		t.Fatal(err)
	}
	if !enginetest.Poll(20*time.Second, func() bool {
		drv.smu.Lock()
		defer drv.smu.Unlock()
		return len(drv.restored) == 1
	}) {
		t.Fatalf("the pool did not refill by restoring: %+v", snapInfo(t, svc))
	}
	if got := svc.pool.status()["python"]; got.Served != 1 {
		t.Fatalf("pool: %+v", got)
	}
}
