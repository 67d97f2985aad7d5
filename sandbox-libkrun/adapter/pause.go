package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/internal/base/excerpt"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Pausing a sandbox (contract 1.3): its machine is saved to files in the sandbox's state
// directory and ended (no CPU, its RAM given back to the host); resume restores it under the
// same sandbox id and host name, with fresh randomness and the host's clock, its processes and
// files as they were. Any other call to a paused sandbox resumes it first. A paused sandbox is
// not reaped for idleness and still counts against max_concurrent_sandboxes; stop removes its
// files.

// PauseRequest is the body of pause and resume.
type PauseRequest struct {
	SandboxID string `json:"sandbox_id"`
}

// PauseReply is the reply of pause.
type PauseReply struct {
	SandboxID string `json:"sandbox_id"`
	Paused    bool   `json:"paused"`
	SizeBytes int64  `json:"size_bytes"`
}

// ResumeReply is the reply of resume.
type ResumeReply struct {
	SandboxID string `json:"sandbox_id"`
	Resumed   bool   `json:"resumed"`
}

// Pause answers pause. A sandbox running an exec or with an attached process is refused S250
// (the exec's or attachment's connection to the machine would be cut); a paused one pauses again
// successfully.
func (s *Service) Pause(ctx context.Context, raw json.RawMessage) (any, error) {
	var req PauseRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, err := checkID(req.SandboxID)
	if err != nil {
		return nil, err
	}
	sv, err := s.saver("pause", id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	box, ok := s.boxes[id]
	s.mu.Unlock()
	if !ok {
		return nil, scode.NotFound(id)
	}
	box.saveMu.Lock()
	defer box.saveMu.Unlock()
	s.mu.Lock()
	switch {
	case box.stopped:
		s.mu.Unlock()
		return nil, scode.Stopped(id)
	case box.paused != nil:
		size := box.paused.SizeBytes
		s.mu.Unlock()
		return PauseReply{SandboxID: id, Paused: true, SizeBytes: size}, nil
	case box.inflight > 0:
		s.mu.Unlock()
		return nil, scode.New(scode.S250, fmt.Sprintf("sandbox::pause: sandbox %s is running %d exec(s); pause it once they are done", id, box.inflight))
	case len(box.atts) > 0:
		s.mu.Unlock()
		return nil, scode.New(scode.S250, fmt.Sprintf("sandbox::pause: sandbox %s has %d attached process(es); pause it once their readers have gone (the processes go on while it is paused and after)", id, len(box.atts)))
	}
	box.pauses++
	dir := filepath.Join(box.stateDir, "paused-"+strconv.Itoa(box.pauses))
	m := box.machine
	box.pausing = true
	s.mu.Unlock()
	meta, err := s.saveMachine(ctx, "pause", box, m, dir, sv.Park)
	s.mu.Lock()
	box.pausing = false
	if err != nil {
		s.mu.Unlock()
		os.RemoveAll(dir)
		return nil, err
	}
	old := box.pauseDir
	box.paused, box.pauseDir = &meta, dir
	s.mu.Unlock()
	if old != "" {
		os.RemoveAll(old) // the machine that mapped it has ended
	}
	return PauseReply{SandboxID: id, Paused: true, SizeBytes: meta.SizeBytes}, nil
}

// Resume answers resume; a running sandbox resumes successfully.
func (s *Service) Resume(ctx context.Context, raw json.RawMessage) (any, error) {
	var req PauseRequest
	if err := decode(raw, &req); err != nil {
		return nil, err
	}
	id, err := checkID(req.SandboxID)
	if err != nil {
		return nil, err
	}
	if _, err := s.admitCtx(ctx, id, false); err != nil {
		return nil, err
	}
	return ResumeReply{SandboxID: id, Resumed: true}, nil
}

// autoPause pauses box for idleness (idle_action: pause); one that cannot be paused is stopped,
// as idle_action: stop would have.
func (s *Service) autoPause(box *sandbox, idleFor time.Duration) {
	defer s.stops.Done()
	defer func() {
		s.mu.Lock()
		box.autoPausing = false
		s.mu.Unlock()
	}()
	_, err := s.Pause(s.streamCtx, json.RawMessage(`{"sandbox_id":"`+box.id+`"}`))
	if err == nil {
		s.opt.Logf("sandbox %s: paused after %s idle", box.id, idleFor.Round(time.Second))
		return
	}
	s.opt.Logf("sandbox %s: reaped after %s idle (pausing it failed: %v)", box.id, idleFor.Round(time.Second), err)
	s.mu.Lock()
	s.markStoppedLocked(box)
	s.mu.Unlock()
}

// resumeBox restores a paused box's machine; a box that is not paused (any more) is left alone.
func (s *Service) resumeBox(ctx context.Context, box *sandbox) error {
	box.saveMu.Lock()
	defer box.saveMu.Unlock()
	s.mu.Lock()
	meta, dir, stopped := box.paused, box.pauseDir, box.stopped
	s.mu.Unlock()
	if meta == nil || stopped {
		return nil
	}
	rs, ok := s.opt.Driver.(vm.Snapshotter)
	if !ok {
		return scode.New(scode.S250, "this adapter's driver cannot restore machines")
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotSaveTimeout)
	defer cancel()
	start := time.Now()
	m, err := rs.Restore(ctx, vm.Spec{RootDisk: filepath.Join(dir, userDiskFile), CPUs: meta.CPUs, MemoryMB: meta.MemoryMB, ScratchMB: meta.ScratchMB,
		Env: meta.Env, StateDir: box.stateDir, Hostname: hostname(box.id)},
		vm.SnapshotFiles{Machine: filepath.Join(dir, userMachineFile)}, meta.KernelRelease)
	if err != nil {
		s.mu.Lock()
		s.markStoppedLocked(box)
		s.mu.Unlock()
		return scode.BootFailed("resuming sandbox " + box.id + ": " + excerpt.Tail(vm.BootDetail(err), 0, bootErrorTail))
	}
	s.mu.Lock()
	box.machine, box.paused, box.lastActive = m, nil, s.opt.Now()
	s.mu.Unlock()
	// The machine has loaded its stream into its own memory: only its root disk stays in use.
	os.Remove(filepath.Join(dir, userMachineFile))
	s.opt.Logf("sandbox %s resumed in %s", box.id, time.Since(start).Round(time.Millisecond))
	return nil
}
