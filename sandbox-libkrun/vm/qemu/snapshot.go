package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// A snapshot is a whole machine saved by qemu's migration to a file: its RAM (the booted kernel,
// the agent waiting on its port, the assembled root with its empty tmpfs upper layer) and its
// devices' state. Only a machine without a vhost-user device can be saved (qemu 7.2 cannot
// migrate vhost-user-fs), so its root is a read-only ext4 image on virtio-blk (vm.Spec.RootDisk)
// and its RAM plain anonymous memory. Each restored copy runs in its own qemu: its RAM, and so
// its writable layer, is its own; the disk is opened read-only by every copy.

// SnapshotInfo describes a snapshot Driver.Snapshot made.
type SnapshotInfo = vm.SnapshotInfo

var _ vm.Snapshotter = (*Driver)(nil)

// Snapshot boots a machine of spec (whose root must be a RootDisk), runs warm on it (commands
// whose files and translated code should be ready in every copy), then saves it to dst, a file
// of mode 0600 written beside dst and renamed over it once complete. The machine is stopped
// afterwards in every case.
func (d *Driver) Snapshot(ctx context.Context, spec vm.Spec, dst string, warm func(context.Context, vm.Machine) error) (SnapshotInfo, error) {
	var info SnapshotInfo
	if spec.RootDisk == "" {
		return info, errors.New("vm: a snapshot needs a machine whose root is a disk image (Spec.RootDisk)")
	}
	if spec.Network {
		return info, errors.New("vm: a machine with networking cannot be snapshotted")
	}
	spec.Deadline = 0
	spec, err := checkSpec(spec)
	if err != nil {
		return info, err
	}
	ownState, err := prepareStateDir(&spec)
	if err != nil {
		return info, err
	}
	m, err := newMachine(spec, ownState)
	if err != nil {
		return info, err
	}
	m.qmpSock = filepath.Join(m.sockDir, "qmp.sock")
	bootCtx, cancel := context.WithTimeout(ctx, d.opt.BootTimeout)
	defer cancel()
	if err := d.start(bootCtx, m, d.Accel()); err != nil {
		return info, m.bootFailed(err)
	}
	defer m.kill()
	info.KernelRelease = m.release
	info.Boot = m.times.Ready.Sub(m.times.Start)
	t := time.Now()
	if warm != nil {
		if err := warm(ctx, m); err != nil {
			return info, fmt.Errorf("vm: warming the machine to snapshot: %w", err)
		}
	}
	info.Warm = time.Since(t)
	t = time.Now()
	if err := d.save(ctx, m, dst); err != nil {
		return info, err
	}
	info.Save = time.Since(t)
	st, err := os.Stat(dst)
	if err != nil {
		return info, err
	}
	info.Size = st.Size()
	return info, nil
}

// save stops m and writes its migration stream to dst (through a temporary file beside it).
func (d *Driver) save(ctx context.Context, m *machine, dst string) error {
	q, err := dialQMP(ctx, m.qmpSock, m.qemu)
	if err != nil {
		return err
	}
	defer q.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	tmpPath := tmp.Name()
	tmp.Close()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmpPath)
		}
	}()
	if _, err := q.execute("stop", nil); err != nil {
		return err
	}
	// qemu limits a migration to 32 MiB/s by default (a live one must leave the network to the
	// guest); a stopped machine saved to a local file has no reason to wait.
	if _, err := q.execute("migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}); err != nil {
		return err
	}
	// The shell's redirection keeps the mode CreateTemp gave the file (0600).
	if _, err := q.execute("migrate", map[string]any{"uri": "exec:cat > " + shellQuote(tmpPath)}); err != nil {
		return err
	}
	if err := q.migrationDone(ctx); err != nil {
		return err
	}
	f, err := os.Open(tmpPath)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	if err := os.Rename(tmpPath, dst); err != nil {
		return err
	}
	ok = true
	return nil
}

// RestoreTimes are the host's timestamps of one restore.
type RestoreTimes struct {
	Start       time.Time // Restore was called
	QemuStarted time.Time // the qemu process was started
	Monitor     time.Time // its control port and monitor are connected, the load asked for
	Loaded      time.Time // qemu has loaded the snapshot and the guest runs
	Ready       time.Time // the agent answered Resume: fresh entropy, clock and host name
}

// Phases splits a restore into consecutive parts whose sum is Ready-Start.
func (t RestoreTimes) Phases() []Phase {
	return []Phase{
		{"qemu start", t.Monitor.Sub(t.Start)},
		{"memory load", t.Loaded.Sub(t.Monitor)},
		{"agent resume", t.Ready.Sub(t.Loaded)},
	}
}

// Restore starts a machine of spec from the snapshot file src, which Snapshot made from a
// machine of the same CPUs, memory, scratch size and root disk. release is the guest kernel's
// release the snapshot recorded. The machine gets its own randomness, the host's clock and
// spec.Hostname before Restore returns. A snapshot qemu cannot load (damaged, truncated, of
// another machine) fails like a boot, with qemu's message from the console in the error.
func (d *Driver) Restore(ctx context.Context, spec vm.Spec, src, release string) (vm.Machine, error) {
	if spec.RootDisk == "" {
		return nil, errors.New("vm: a restore needs the snapshot's root disk (Spec.RootDisk)")
	}
	spec, err := checkSpec(spec)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(src); err != nil {
		return nil, bootError(fmt.Errorf("snapshot: %w", err))
	}
	ownState, err := prepareStateDir(&spec)
	if err != nil {
		return nil, err
	}
	m, err := newMachine(spec, ownState)
	if err != nil {
		return nil, err
	}
	m.release = release
	m.qmpSock = filepath.Join(m.sockDir, "qmp.sock")
	m.incoming = true
	m.restored = &RestoreTimes{Start: m.times.Start}
	ctx, cancel := context.WithTimeout(ctx, d.opt.BootTimeout)
	defer cancel()
	if err := d.restore(ctx, m, src); err != nil {
		return nil, m.bootFailed(err)
	}
	return m, nil
}

func (d *Driver) restore(ctx context.Context, m *machine, src string) error {
	log, err := os.Create(m.console)
	if err != nil {
		return err
	}
	defer log.Close()
	rt := m.restored
	// qemu reads the snapshot from a descriptor it inherits (fd:3), with no copying process
	// and pipe in between.
	snap, err := os.Open(src)
	if err != nil {
		return bootError(fmt.Errorf("snapshot: %w", err))
	}
	m.snapFile = snap
	// The control port connects before the snapshot loads, so the guest's port finds its host
	// connected as when it was saved and never sees a hang-up.
	err = d.startQemu(ctx, m, d.Accel(), nil, log)
	snap.Close()
	m.snapFile = nil
	if err != nil {
		return err
	}
	rt.QemuStarted = m.times.QemuStarted
	q, err := dialQMP(ctx, m.qmpSock, m.qemu)
	if err != nil {
		return err
	}
	defer q.Close()
	// Without the events capability qemu announces only the start of an incoming migration.
	if _, err := q.execute("migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "events", "state": true}}}); err != nil {
		return err
	}
	if _, err := q.execute("migrate-incoming", map[string]any{"uri": "fd:3"}); err != nil {
		return err
	}
	rt.Monitor = time.Now()
	if err := q.awaitMigration(); err != nil {
		m.qemu.waitFor(3 * time.Second) // qemu ends on a failed load: let it write why
		return fmt.Errorf("loading the snapshot %s: %w", src, err)
	}
	// The machine was saved stopped, so it is loaded stopped.
	if _, err := q.execute("cont", nil); err != nil {
		return err
	}
	rt.Loaded = time.Now()
	r := proto.Resume{Entropy: make([]byte, 64), UnixNano: time.Now().UnixNano(), Hostname: m.spec.Hostname}
	if _, err := randRead(r.Entropy); err != nil {
		return fmt.Errorf("entropy for the guest: %w", err)
	}
	if _, err := m.request(ctx, proto.TypeResume, r); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	rt.Ready = time.Now()
	m.times.Ready = rt.Ready
	if m.spec.Deadline > 0 {
		t := time.AfterFunc(m.spec.Deadline, m.kill)
		m.mu.Lock()
		m.deadline = t
		m.mu.Unlock()
	}
	return nil
}

// RestoreTimes reports the timestamps of a restored machine, or nil for a booted one.
func (m *machine) RestoreTimes() *RestoreTimes { return m.restored }

// shellQuote quotes s as one word for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
