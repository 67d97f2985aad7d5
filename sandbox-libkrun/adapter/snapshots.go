package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/iii-go/iii/internal/base/excerpt"

	"github.com/iii-go/iii/sandbox-libkrun/snapshot"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// snapshotMakeTimeout bounds the background making of one snapshot (boot, warm-up, save).
const snapshotMakeTimeout = 5 * time.Minute

// SnapshotStatus is the snapshots part of adapter::info (present when snapshots are on).
type SnapshotStatus struct {
	Dir       string   `json:"dir"`
	Restored  uint64   `json:"restored"`       // sandboxes started from a snapshot
	Booted    uint64   `json:"booted"`         // cold sandboxes booted (no snapshot yet, or networking)
	Fallbacks uint64   `json:"fallbacks"`      // snapshots that failed to restore, the sandbox booted instead
	Made      uint64   `json:"made"`           // snapshots made by this adapter
	Making    int      `json:"making"`         // snapshots being made now
	Last      string   `json:"last,omitempty"` // the directory of the snapshot made last
	LastError string   `json:"last_error,omitempty"`
	Sandboxes []string `json:"sandboxes"` // live sandboxes that were restored from a snapshot
}

// snapshots restores cold sandboxes from image snapshots and makes the missing ones in the
// background.
type snapshots struct {
	store    *snapshot.Store
	drv      vm.Snapshotter
	firmware string // the firmware's identity in the key
	accel    string
	arch     string
	version  string
	logf     func(string, ...any)

	mu     sync.Mutex
	st     SnapshotStatus
	making map[string]bool
	wg     sync.WaitGroup
}

func newSnapshots(opt Options) *snapshots {
	sn, ok := opt.Driver.(vm.Snapshotter)
	if !ok || opt.Snapshots == nil {
		return nil
	}
	s := &snapshots{store: opt.Snapshots, drv: sn, firmware: opt.FirmwareID, accel: opt.Accelerator, arch: opt.GuestArch,
		version: opt.Version, logf: opt.Logf, making: map[string]bool{}, st: SnapshotStatus{Dir: opt.Snapshots.Dir}}
	// The checksums of what an earlier adapter made are checked now, off every caller's path.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for _, err := range s.store.VerifyAll() {
			s.failed(err.Error())
		}
	}()
	return s
}

// key is the snapshot key of a machine of p on rootfs.
func (sn *snapshots) key(rootfs string, p createParams) snapshot.Key {
	return snapshot.Key{Firmware: sn.firmware, Image: imageDigest(rootfs), Agent: proto.AgentVersion, Accelerator: sn.accel,
		Arch: sn.arch, CPUs: int(p.cpus), MemoryMB: int(p.mem), ScratchMB: int(p.mem) / 2, Version: sn.version}
}

// imageDigest identifies the image whose root is rootfs: the digest the cache recorded beside it
// (<rootfs>.json), else the directory and its modification time.
func imageDigest(rootfs string) string {
	var meta struct {
		Digest string `json:"digest"`
	}
	if b, err := os.ReadFile(rootfs + ".json"); err == nil && json.Unmarshal(b, &meta) == nil && meta.Digest != "" {
		return meta.Digest
	}
	st, err := os.Stat(rootfs)
	if err != nil {
		return rootfs
	}
	return fmt.Sprintf("%s@%d", rootfs, st.ModTime().UnixNano())
}

// restore starts the sandbox id from the snapshot of its image and parameters. A nil machine
// means it must boot instead: networking, no snapshot yet, or a snapshot that failed (discarded
// and logged). Then, unless it is nil, the caller calls after once its own machine has booted:
// it makes the snapshot in the background, so the making never competes with the caller's boot.
func (sn *snapshots) restore(ctx context.Context, bg context.Context, id, image, rootfs string, p createParams, env []string, stateDir string) (m vm.Machine, after func()) {
	if p.network {
		sn.count(func(st *SnapshotStatus) { st.Booted++ })
		return nil, nil
	}
	k := sn.key(rootfs, p)
	e, err := sn.store.Lookup(k)
	if err != nil {
		if !errors.Is(err, snapshot.ErrNone) {
			sn.failed(fmt.Sprintf("image %s: %v; booting", image, err))
		}
		sn.count(func(st *SnapshotStatus) { st.Booted++ })
		return nil, func() { sn.makeInBackground(bg, k, image, rootfs) }
	}
	m, err = sn.drv.Restore(ctx, vm.Spec{RootDisk: keepDisk(e.Disk(), stateDir), CPUs: int(p.cpus), MemoryMB: int(p.mem), ScratchMB: int(p.mem) / 2,
		Env: env, StateDir: stateDir, Hostname: hostname(id)}, e.Machine(), e.Meta.KernelRelease)
	if err != nil {
		sn.store.Discard(k)
		sn.failed(fmt.Sprintf("image %s: restoring the snapshot %s failed, booting instead: %s", image, e.Dir, excerpt.Tail(vm.BootDetail(err), 0, bootErrorTail)))
		sn.count(func(st *SnapshotStatus) { st.Fallbacks++; st.Booted++ })
		return nil, func() { sn.makeInBackground(bg, k, image, rootfs) }
	}
	sn.count(func(st *SnapshotStatus) { st.Restored++ })
	return m, nil
}

// hostname is the guest host name of sandbox id.
func hostname(id string) string {
	if len(id) > 8 {
		id = id[:8]
	}
	return "sbx-" + id
}

func (sn *snapshots) count(f func(*SnapshotStatus)) {
	sn.mu.Lock()
	f(&sn.st)
	sn.mu.Unlock()
}

func (sn *snapshots) failed(msg string) {
	sn.logf("snapshot: %s", msg)
	sn.count(func(st *SnapshotStatus) { st.LastError = msg })
}

// makeInBackground makes the snapshot of k unless one is being made; bg ends it early (the
// adapter's shutdown).
func (sn *snapshots) makeInBackground(bg context.Context, k snapshot.Key, image, rootfs string) {
	id := k.ID()
	sn.mu.Lock()
	if sn.making[id] {
		sn.mu.Unlock()
		return
	}
	sn.making[id] = true
	sn.st.Making++
	sn.mu.Unlock()
	sn.wg.Add(1)
	go func() {
		defer sn.wg.Done()
		ctx, cancel := context.WithTimeout(bg, snapshotMakeTimeout)
		defer cancel()
		start := time.Now()
		var info vm.SnapshotInfo
		e, err := sn.store.Make(k, func(dir string) (string, error) {
			disk := filepath.Join(dir, snapshot.DiskFile)
			if err := snapshot.BuildRootDisk(ctx, rootfs, disk); err != nil {
				return "", err
			}
			state, err := os.MkdirTemp("", "iii-snap-")
			if err != nil {
				return "", err
			}
			defer os.RemoveAll(state)
			info, err = sn.drv.Snapshot(ctx, vm.Spec{RootDisk: disk, CPUs: k.CPUs, MemoryMB: k.MemoryMB, ScratchMB: k.ScratchMB, StateDir: state},
				vm.SnapshotFiles{Machine: filepath.Join(dir, snapshot.MachineFile), RAM: filepath.Join(dir, snapshot.RAMFile)}, func(ctx context.Context, m vm.Machine) error { return warmUp(ctx, m, image) })
			return info.KernelRelease, err
		})
		sn.mu.Lock()
		delete(sn.making, id)
		sn.st.Making--
		if err == nil {
			sn.st.Made++
			sn.st.Last = e.Dir
		}
		sn.mu.Unlock()
		if err != nil && bg.Err() != nil {
			sn.logf("snapshot: image %s (%d cpus, %d MiB): making a snapshot stopped with the adapter", image, k.CPUs, k.MemoryMB)
			return
		}
		if err != nil {
			sn.failed(fmt.Sprintf("image %s (%d cpus, %d MiB): making a snapshot failed: %s", image, k.CPUs, k.MemoryMB, excerpt.Tail(vm.BootDetail(err), 0, bootErrorTail)))
			return
		}
		sn.logf("snapshot: image %s (%d cpus, %d MiB) made in %s (boot %s, warm-up %s, save %s): %d MiB in %s",
			image, k.CPUs, k.MemoryMB, time.Since(start).Round(time.Millisecond), info.Boot.Round(time.Millisecond),
			info.Warm.Round(time.Millisecond), info.Save.Round(time.Millisecond), (e.Meta.Sizes[snapshot.DiskFile]+info.Size)>>20, e.Dir)
	}()
}

// warmUp runs the image's warm-up commands (those of the warm pool) in m.
func warmUp(ctx context.Context, m vm.Machine, image string) error {
	cmds, ok := warmUps[image]
	if !ok {
		cmds = defaultWarmUp
	}
	for _, argv := range cmds {
		res, err := m.Exec(ctx, vm.ExecRequest{Argv: argv, Timeout: time.Minute})
		if err != nil {
			return err
		}
		if res.ExitCode == nil || *res.ExitCode != 0 {
			return fmt.Errorf("warm-up %q failed: %s", argv, res.Stderr)
		}
	}
	return nil
}

// status is adapter::info's snapshots, with the live sandboxes among restored.
func (sn *snapshots) status(restored []string) *SnapshotStatus {
	sn.mu.Lock()
	st := sn.st
	sn.mu.Unlock()
	sort.Strings(restored)
	st.Sandboxes = append([]string{}, restored...)
	return &st
}

// wait waits for the snapshots being made (after their context is cancelled).
func (sn *snapshots) wait() { sn.wg.Wait() }
