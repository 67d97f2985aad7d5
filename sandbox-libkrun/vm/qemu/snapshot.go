package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// A snapshot is a whole machine saved by qemu: its RAM (the booted kernel, the agent waiting on
// its port, the assembled root with its empty tmpfs upper layer) in one file, and its devices'
// state, qemu's migration stream without that RAM (capability x-ignore-shared), in another. Only
// a machine without a vhost-user device can be saved (qemu 7.2 cannot migrate vhost-user-fs), so
// its root is a read-only ext4 image on virtio-blk (vm.Spec.RootDisk). The saved machine's RAM is
// the file, mapped shared, so what the guest wrote is in the file when it stops; each restored
// copy runs in its own qemu, which maps the file private: its pages come from the host's page
// cache when the guest first touches them, nothing is loaded up front, and what a copy writes
// is its own. The disk is opened read-only by every copy.

// SnapshotInfo describes a snapshot Driver.Snapshot made.
type SnapshotInfo = vm.SnapshotInfo

var _ vm.Snapshotter = (*Driver)(nil)

// Snapshot boots a machine of spec (whose root must be a RootDisk), runs warm on it (commands
// whose files should be ready in every copy), then saves it to dst: each file of mode 0600 is
// written beside its name and renamed over it once complete. The machine is stopped afterwards
// in every case.
func (d *Driver) Snapshot(ctx context.Context, spec vm.Spec, dst vm.SnapshotFiles, warm func(context.Context, vm.Machine) error) (SnapshotInfo, error) {
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
	// qemu sizes an empty file to the machine's memory and keeps the mode it was made with.
	ram, err := tempBeside(dst.RAM)
	if err != nil {
		return info, err
	}
	defer os.Remove(ram)
	m, err := newMachine(spec, ownState)
	if err != nil {
		return info, err
	}
	m.qmpSock = filepath.Join(m.sockDir, "qmp.sock")
	m.ram = ram
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
	if err := d.save(ctx, m, dst.Machine, dst.Transient); err != nil {
		return info, err
	}
	m.kill()
	if err := finishRAM(ram, dst.Transient); err != nil {
		return info, fmt.Errorf("vm: the snapshot's RAM %s: %w", ram, err)
	}
	if err := os.Rename(ram, dst.RAM); err != nil {
		return info, err
	}
	info.Save = time.Since(t)
	for _, f := range []string{dst.Machine, dst.RAM} {
		n, err := diskBytes(f)
		if err != nil {
			return info, err
		}
		info.Size += n
	}
	return info, nil
}

// tempBeside creates an empty file of mode 0600 in the directory of path and returns its name.
func tempBeside(path string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", err
	}
	return f.Name(), f.Close()
}

// save stops m and writes its migration stream to dst (through a temporary file beside it),
// synced to disk unless transient.
func (d *Driver) save(ctx context.Context, m *machine, dst string, transient bool) error {
	q, err := dialQMP(ctx, m.qmpSock, m.qemu)
	if err != nil {
		return err
	}
	defer q.Close()
	tmpPath, err := tempBeside(dst)
	if err != nil {
		return err
	}
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
	// The guest's RAM is already in its file (a shared mapping): the stream leaves it out.
	if err := setCapabilities(q, "x-ignore-shared"); err != nil {
		return err
	}
	if err := q.migrateToFile(ctx, tmpPath); err != nil {
		return err
	}
	if err := renameSynced(tmpPath, dst, transient); err != nil {
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

// Restore starts a machine of spec from the snapshot files src, which Snapshot (or Save) made
// from a machine of the same CPUs, memory, scratch size and root disk; with src.RAM empty,
// src.Machine is the whole stream Park wrote, loaded into the machine's own memory. release is the guest kernel's
// release the snapshot recorded. The machine gets its own randomness, the host's clock and
// spec.Hostname before Restore returns. A snapshot qemu cannot load (damaged, truncated, of
// another machine) fails like a boot, with qemu's message from the console in the error.
func (d *Driver) Restore(ctx context.Context, spec vm.Spec, src vm.SnapshotFiles, release string) (vm.Machine, error) {
	if spec.RootDisk == "" {
		return nil, errors.New("vm: a restore needs the snapshot's root disk (Spec.RootDisk)")
	}
	if spec.Network {
		// A copy's qemu is started on the spawn thread, outside the network guard.
		return nil, errors.New("vm: a restored machine has no networking")
	}
	spec, err := checkSpec(spec)
	if err != nil {
		return nil, err
	}
	for _, f := range []string{src.Machine, src.RAM} {
		if f == "" {
			continue // a parked machine's stream: no RAM file
		}
		if _, err := os.Stat(f); err != nil {
			return nil, bootError(fmt.Errorf("snapshot: %w", err))
		}
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
	m.ram = src.RAM
	m.restored = &RestoreTimes{Start: m.times.Start}
	ctx, cancel := context.WithTimeout(ctx, d.opt.BootTimeout)
	defer cancel()
	if err := d.restore(ctx, m, src); err != nil {
		return nil, m.bootFailed(err)
	}
	return m, nil
}

func (d *Driver) restore(ctx context.Context, m *machine, src vm.SnapshotFiles) error {
	log, err := os.Create(m.console)
	if err != nil {
		return err
	}
	defer log.Close()
	rt := m.restored
	// qemu reads the snapshot from a descriptor it inherits (fd:3), with no copying process
	// and pipe in between.
	snap, err := os.Open(src.Machine)
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
	// Without the events capability qemu announces only the start of an incoming migration;
	// x-ignore-shared is the format of a snapshot's stream (no RAM in it), not of a parked
	// machine's (src.RAM empty: its RAM is in the stream).
	caps := []string{"events"}
	if src.RAM != "" {
		caps = append(caps, "x-ignore-shared")
	}
	if err := setCapabilities(q, caps...); err != nil {
		return err
	}
	if _, err := q.execute("migrate-incoming", map[string]any{"uri": "fd:3"}); err != nil {
		return err
	}
	rt.Monitor = time.Now()
	if err := q.awaitMigration(); err != nil {
		m.qemu.waitFor(3 * time.Second) // qemu ends on a failed load: let it write why
		return fmt.Errorf("loading the snapshot %s: %w", src.Machine, err)
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
	res, err := m.request(ctx, proto.TypeResume, r)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	// An agent before revision 9 answers without its version: it runs no processes.
	var resumed proto.Resumed
	if len(res) > 0 && json.Unmarshal(res, &resumed) == nil {
		m.agent = resumed.Agent
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

// setCapabilities turns on qemu's migration capabilities names.
func setCapabilities(q *qmp, names ...string) error {
	var caps []map[string]any
	for _, n := range names {
		caps = append(caps, map[string]any{"capability": n, "state": true})
	}
	_, err := q.execute("migrate-set-capabilities", map[string]any{"capabilities": caps})
	return err
}
