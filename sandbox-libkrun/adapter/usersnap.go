package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/excerpt"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Snapshots of running sandboxes (contract 1.3). sandbox::snapshot saves a running sandbox's
// machine (its RAM, which holds the files it wrote and its processes, and its devices) beside a
// hard link to its read-only root disk, in a directory of its own under the adapter's user
// snapshot directory: files 0600 in 0700 directories, kept until sandbox::snapshot::delete and
// across the adapter's restarts, their disk use bounded by user_snapshots_mb. sandbox::create
// {snapshot_id} restores a copy, sandbox::fork restores several from a temporary one. The adapter
// sees no caller's identity: a snapshot belongs to the adapter and is listed, restored and
// deleted by anyone who may call sandbox::* (docs/trust-model.md).

// The files of a user snapshot's directory.
const (
	userMachineFile = "machine.snap"
	userRAMFile     = "ram.img"
	userDiskFile    = "root.ext4"
	userMetaFile    = "snapshot.json"
)

// snapshotSaveTimeout bounds saving one sandbox.
const snapshotSaveTimeout = 5 * time.Minute

// userSnapMeta is a user snapshot's snapshot.json: what a restore needs and what list shows.
type userSnapMeta struct {
	SnapshotID    string    `json:"snapshot_id"`
	Name          string    `json:"name,omitempty"`
	Image         string    `json:"image"`
	SandboxID     string    `json:"source_sandbox_id"`
	CPUs          int       `json:"cpus"`
	MemoryMB      int       `json:"memory_mb"`
	ScratchMB     int       `json:"scratch_mb"`
	Env           []string  `json:"env,omitempty"`
	KernelRelease string    `json:"kernel_release"`
	CreatedAt     time.Time `json:"created_at"`
	SizeBytes     int64     `json:"size_bytes"`
}

// userSnaps is the directory of the snapshots of running sandboxes.
type userSnaps struct {
	dir     string
	limitMB uint64
	mu      sync.Mutex // orders a new snapshot's size check with the others' deletes
}

// userSnapDir is the directory of the snapshots of running sandboxes: Options.UserSnapshotDir,
// else user-snapshots beside the image snapshots, else under the adapter's state directory.
func userSnapDir(opt Options) string {
	switch {
	case opt.UserSnapshotDir != "":
		return opt.UserSnapshotDir
	case opt.Snapshots != nil:
		return filepath.Join(filepath.Dir(opt.Snapshots.Dir), "user-snapshots")
	}
	return filepath.Join(opt.StateDir, "user-snapshots")
}

// saver is the driver's vm.Saver, or S250 saying this adapter cannot save machines.
func (s *Service) saver(op, id string) (vm.Saver, error) {
	sv, ok := s.opt.Driver.(vm.Saver)
	if !ok || s.snaps == nil {
		return nil, scode.New(scode.S250, fmt.Sprintf("sandbox::%s of %s: this adapter cannot save machines (its driver %s has no snapshots, or the setting snapshots is off)", op, id, s.opt.Driver.Name()))
	}
	return sv, nil
}

// saveBox saves box's machine into dir (created 0700) and returns the metadata of what was saved.
// The sandbox goes on running.
func (s *Service) saveBox(ctx context.Context, op string, box *sandbox, dir string) (userSnapMeta, error) {
	sv, err := s.saver(op, box.id)
	if err != nil {
		return userSnapMeta{}, err
	}
	box.saveMu.Lock()
	defer box.saveMu.Unlock()
	s.mu.Lock()
	m := box.machine
	s.mu.Unlock()
	return s.saveMachine(ctx, op, box, m, dir, sv.Save)
}

// saveMachine saves box's machine m with save (vm.Saver's Save or Park) into dir, created 0700,
// beside a link to its root disk; the caller holds box.saveMu.
func (s *Service) saveMachine(ctx context.Context, op string, box *sandbox, m vm.Machine, dir string,
	save func(context.Context, vm.Machine, vm.SnapshotFiles) (vm.Spec, vm.SnapshotInfo, error)) (userSnapMeta, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return userSnapMeta{}, scode.New(scode.S400, fmt.Sprintf("sandbox::%s: cannot create %s: %v", op, dir, err))
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotSaveTimeout)
	defer cancel()
	// Only a snapshot outlives the adapter: a fork's and a pause's files are not synced to disk.
	spec, info, err := save(ctx, m, vm.SnapshotFiles{Machine: filepath.Join(dir, userMachineFile), RAM: filepath.Join(dir, userRAMFile),
		Transient: op != "snapshot"})
	if errors.Is(err, vm.ErrNotSavable) {
		return userSnapMeta{}, scode.New(scode.S250, fmt.Sprintf("sandbox::%s: sandbox %s: %v", op, box.id, err))
	}
	if err != nil {
		return userSnapMeta{}, scode.New(scode.S300, fmt.Sprintf("sandbox::%s: saving sandbox %s failed: %s", op, box.id, excerpt.Tail(err.Error(), 0, bootErrorTail)))
	}
	disk := filepath.Join(dir, userDiskFile)
	if err := linkOrCopy(spec.RootDisk, disk); err != nil {
		return userSnapMeta{}, scode.New(scode.S300, fmt.Sprintf("sandbox::%s: keeping the root disk of sandbox %s: %v", op, box.id, err))
	}
	size := info.Size
	if n, err := fileBlocks(disk); err == nil {
		size += n
	}
	s.opt.Logf("sandbox %s saved to %s: %d MiB, paused %s, saved in %s", box.id, dir, size>>20, info.Paused.Round(time.Millisecond), info.Save.Round(time.Millisecond))
	return userSnapMeta{Image: box.image, SandboxID: box.id, CPUs: spec.CPUs, MemoryMB: spec.MemoryMB, ScratchMB: spec.ScratchMB,
		Env: spec.Env, KernelRelease: info.KernelRelease, CreatedAt: s.opt.Now().UTC(), SizeBytes: size}, nil
}

// linkOrCopy makes dst a hard link to src, or a copy of mode 0600 where a link cannot be made.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// keepDisk hard-links the root disk src into a restored sandbox's state directory and returns the
// link, so the sandbox can be saved or paused however long it outlives the snapshot it came from
// (a fork's temporary one, a deleted one, an evicted image snapshot); where no link can be made
// (another file system) it returns src.
func keepDisk(src, stateDir string) string {
	dst := filepath.Join(stateDir, userDiskFile)
	if err := os.Link(src, dst); err != nil {
		return src
	}
	return dst
}

// fileBlocks is the disk the file at path takes.
func fileBlocks(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512, nil
	}
	return st.Size(), nil
}

// SnapshotRequest is the body of snapshot.
type SnapshotRequest struct {
	SandboxID string  `json:"sandbox_id"`
	Name      *string `json:"name"`
}

// SnapshotReply is the reply of snapshot.
type SnapshotReply struct {
	SnapshotID string `json:"snapshot_id"`
	SizeBytes  int64  `json:"size_bytes"`
}

// maxSnapshotName bounds a snapshot's name.
const maxSnapshotName = 128

// Snapshot answers snapshot: the running sandbox is saved and goes on.
func (s *Service) Snapshot(ctx context.Context, raw json.RawMessage) (any, error) {
	var req SnapshotRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, err := checkID(req.SandboxID)
	if err != nil {
		return nil, err
	}
	var name string
	if req.Name != nil {
		if name = *req.Name; len(name) > maxSnapshotName {
			return nil, scode.Invalid(fmt.Sprintf("name is %d bytes, at most %d", len(name), maxSnapshotName))
		}
	}
	box, err := s.admit(id, false)
	if err != nil {
		return nil, err
	}
	if _, err := s.saver("snapshot", id); err != nil {
		return nil, err
	}
	us := s.users
	sid := uuid.NewString()
	dir := filepath.Join(us.dir, sid)
	meta, err := s.saveBox(ctx, "snapshot", box, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	meta.SnapshotID, meta.Name = sid, name
	us.mu.Lock()
	defer us.mu.Unlock()
	if used := us.used(sid); uint64(used+meta.SizeBytes) > us.limitMB<<20 {
		os.RemoveAll(dir)
		return nil, scode.Limit(fmt.Sprintf("user_snapshots_mb (%d): the snapshots in %s take %d MiB and this one %d MiB; delete some with sandbox::snapshot::delete",
			us.limitMB, us.dir, used>>20, (meta.SizeBytes+1<<20-1)>>20))
	}
	if err := writeMeta(filepath.Join(dir, userMetaFile), meta); err != nil {
		os.RemoveAll(dir)
		return nil, scode.New(scode.S300, "sandbox::snapshot: "+err.Error())
	}
	return SnapshotReply{SnapshotID: sid, SizeBytes: meta.SizeBytes}, nil
}

// writeMeta writes meta to path, mode 0600, through a file renamed into place.
func writeMeta(path string, meta userSnapMeta) error {
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// all lists the complete snapshots (those with their snapshot.json), newest first.
func (us *userSnaps) all() []userSnapMeta {
	ents, _ := os.ReadDir(us.dir)
	var out []userSnapMeta
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if m, err := us.read(e.Name()); err == nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].SnapshotID < out[j].SnapshotID
	})
	return out
}

// read is the metadata of snapshot id, S251 when there is none.
func (us *userSnaps) read(id string) (userSnapMeta, error) {
	var m userSnapMeta
	b, err := os.ReadFile(filepath.Join(us.dir, id, userMetaFile))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil || m.SnapshotID != id {
		return m, scode.New(scode.S251, "snapshot not found: "+id)
	}
	return m, nil
}

// used is the disk the kept snapshots take, but except's.
func (us *userSnaps) used(except string) int64 {
	var n int64
	for _, m := range us.all() {
		if m.SnapshotID != except {
			n += m.SizeBytes
		}
	}
	return n
}

// SnapshotEntry is one row of snapshot::list.
type SnapshotEntry struct {
	SnapshotID  string `json:"snapshot_id"`
	Name        string `json:"name,omitempty"`
	Image       string `json:"image"`
	SandboxID   string `json:"source_sandbox_id"`
	CPUs        int    `json:"cpus"`
	MemoryMB    int    `json:"memory_mb"`
	SizeBytes   int64  `json:"size_bytes"`
	CreatedAtMS int64  `json:"created_at_ms"`
}

// SnapshotList answers snapshot::list: the kept snapshots, newest first, their total size and
// the bound.
func (s *Service) SnapshotList(_ context.Context, raw json.RawMessage) (any, error) {
	var ignored struct{}
	if err := decode(raw, &ignored); err != nil {
		return nil, err
	}
	rows := []SnapshotEntry{}
	var total int64
	for _, m := range s.users.all() {
		rows = append(rows, SnapshotEntry{SnapshotID: m.SnapshotID, Name: m.Name, Image: m.Image, SandboxID: m.SandboxID, CPUs: m.CPUs,
			MemoryMB: m.MemoryMB, SizeBytes: m.SizeBytes, CreatedAtMS: m.CreatedAt.UnixMilli()})
		total += m.SizeBytes
	}
	return map[string]any{"snapshots": rows, "total_bytes": total, "limit_bytes": s.users.limitMB << 20}, nil
}

// SnapshotDeleteRequest is the body of snapshot::delete.
type SnapshotDeleteRequest struct {
	SnapshotID string `json:"snapshot_id"`
}

// SnapshotDelete answers snapshot::delete. Sandboxes restored from the snapshot keep running:
// their qemu holds the files it opened.
func (s *Service) SnapshotDelete(_ context.Context, raw json.RawMessage) (any, error) {
	var req SnapshotDeleteRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, err := checkSnapshotID(req.SnapshotID)
	if err != nil {
		return nil, err
	}
	us := s.users
	us.mu.Lock()
	defer us.mu.Unlock()
	if _, err := us.read(id); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(filepath.Join(us.dir, id)); err != nil {
		return nil, scode.New(scode.S400, "sandbox::snapshot::delete: "+err.Error())
	}
	return map[string]any{"snapshot_id": id, "deleted": true}, nil
}

// checkSnapshotID checks a snapshot id's form (a UUID, as the adapter makes them).
func checkSnapshotID(id string) (string, error) {
	if id == "" {
		return "", scode.Invalid("snapshot_id is required")
	}
	if !uuidRe.MatchString(id) {
		return "", scode.Invalid("snapshot_id is not a valid UUID: " + id)
	}
	return strings.ToLower(id), nil
}

// createFromSnapshot answers create {snapshot_id}: a copy of the saved sandbox with its own
// randomness, the host's clock, its own host name and sandbox id. The snapshot fixes the image,
// CPUs, memory, environment and networking (none): a request that sets them otherwise is S001.
func (s *Service) createFromSnapshot(ctx context.Context, req CreateRequest) (*sandbox, error) {
	id, err := checkSnapshotID(*req.SnapshotID)
	if err != nil {
		return nil, err
	}
	meta, err := s.users.read(id)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Image != nil && *req.Image != meta.Image:
		return nil, scode.Invalid(fmt.Sprintf("image %q: snapshot %s is of image %q (leave image out)", *req.Image, id, meta.Image))
	case req.CPUs != nil && int(*req.CPUs) != meta.CPUs:
		return nil, scode.Invalid(fmt.Sprintf("cpus %d: snapshot %s has %d (leave cpus out)", *req.CPUs, id, meta.CPUs))
	case req.MemoryMB != nil && int(*req.MemoryMB) != meta.MemoryMB:
		return nil, scode.Invalid(fmt.Sprintf("memory_mb %d: snapshot %s has %d (leave memory_mb out)", *req.MemoryMB, id, meta.MemoryMB))
	case networkAsked(req.Network):
		return nil, scode.Invalid("network: a sandbox restored from a snapshot has no networking")
	case len(req.Env) > 0 && string(req.Env) != "null":
		return nil, scode.Invalid("env: a sandbox restored from a snapshot keeps the snapshot's environment")
	}
	dir := filepath.Join(s.users.dir, id)
	boxes, err := s.restoreCopies(ctx, meta, dir, 1, req)
	if err != nil {
		return nil, err
	}
	return boxes[0], nil
}

// restoreCopies starts count sandboxes from the saved machine in dir, each taking a slot of
// max_concurrent_sandboxes; on a failure the copies already started are stopped.
func (s *Service) restoreCopies(ctx context.Context, meta userSnapMeta, dir string, count int, req CreateRequest) ([]*sandbox, error) {
	sv, err := s.saver("create", meta.SandboxID)
	if err != nil {
		return nil, err
	}
	rs, ok := sv.(vm.Snapshotter)
	if !ok {
		return nil, scode.New(scode.S250, "this adapter's driver cannot restore machines")
	}
	idle := time.Duration(s.opt.Settings.DefaultIdleTimeoutSecs) * time.Second
	if req.IdleTimeoutSecs != nil {
		idle = time.Duration(*req.IdleTimeoutSecs) * time.Second
	}
	var boxes []*sandbox
	fail := func(err error) ([]*sandbox, error) {
		s.mu.Lock()
		for _, b := range boxes {
			s.markStoppedLocked(b)
		}
		s.mu.Unlock()
		return nil, err
	}
	for range count {
		if _, err := s.reserve(meta.Image, uint32(meta.CPUs), uint32(meta.MemoryMB)); err != nil {
			return fail(err)
		}
		box, err := s.restoreOne(ctx, rs, meta, dir, idle, req)
		s.mu.Lock()
		s.booting--
		s.mu.Unlock()
		if err != nil {
			return fail(err)
		}
		boxes = append(boxes, box)
	}
	return boxes, nil
}

// restoreOne starts one sandbox from the saved machine in dir.
func (s *Service) restoreOne(ctx context.Context, rs vm.Snapshotter, meta userSnapMeta, dir string, idle time.Duration, req CreateRequest) (*sandbox, error) {
	id := uuid.NewString()
	stateDir := filepath.Join(s.opt.StateDir, strings.ReplaceAll(id, "-", "")[:16])
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, scode.BootFailed("cannot create the machine state directory: " + err.Error())
	}
	m, err := rs.Restore(ctx, vm.Spec{RootDisk: keepDisk(filepath.Join(dir, userDiskFile), stateDir), CPUs: meta.CPUs, MemoryMB: meta.MemoryMB, ScratchMB: meta.ScratchMB,
		Env: meta.Env, StateDir: stateDir, Hostname: hostname(id)},
		vm.SnapshotFiles{Machine: filepath.Join(dir, userMachineFile), RAM: filepath.Join(dir, userRAMFile)}, meta.KernelRelease)
	if err != nil {
		os.RemoveAll(stateDir)
		return nil, scode.BootFailed(excerpt.Tail(vm.BootDetail(err), 0, bootErrorTail))
	}
	box := s.addBox(req, id, meta.Image, idle, pooled{m: m, stateDir: stateDir}, nil, "from the snapshot of sandbox "+meta.SandboxID)
	s.mu.Lock()
	box.fromSnapshot = true
	s.mu.Unlock()
	return box, nil
}

// ForkRequest is the body of fork.
type ForkRequest struct {
	SandboxID string  `json:"sandbox_id"`
	Count     *uint32 `json:"count"`
}

// maxFork bounds one fork's count (max_concurrent_sandboxes bounds it too).
const maxFork = 64

// Fork answers fork: count new sandboxes that go on from the running sandbox's state (its
// files, memory and processes), restored from a temporary snapshot that is removed once they
// run (their qemu keeps the files open); the sandbox goes on too.
func (s *Service) Fork(ctx context.Context, raw json.RawMessage) (any, error) {
	var req ForkRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, err := checkID(req.SandboxID)
	if err != nil {
		return nil, err
	}
	count := uint32(1)
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > maxFork {
		return nil, scode.Invalid(fmt.Sprintf("count must be 1..%d, got %d", maxFork, count))
	}
	box, err := s.admit(id, false)
	if err != nil {
		return nil, err
	}
	if _, err := s.saver("fork", id); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(s.users.dir, ".fork-")
	if err != nil {
		if err = os.MkdirAll(s.users.dir, 0o700); err == nil {
			dir, err = os.MkdirTemp(s.users.dir, ".fork-")
		}
		if err != nil {
			return nil, scode.New(scode.S400, "sandbox::fork: "+err.Error())
		}
	}
	defer os.RemoveAll(dir)
	meta, err := s.saveBox(ctx, "fork", box, dir)
	if err != nil {
		return nil, err
	}
	boxes, err := s.restoreCopies(ctx, meta, dir, int(count), CreateRequest{})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	parentIdle := box.idle
	s.mu.Unlock()
	ids := make([]string, len(boxes))
	for i, b := range boxes {
		s.mu.Lock()
		b.idle = parentIdle
		s.mu.Unlock()
		ids[i] = b.id
	}
	return map[string]any{"sandbox_ids": ids}, nil
}
