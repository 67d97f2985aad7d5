package project

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/supervisor"
)

// StateRestarting is a container its restart policy will start again after a backoff.
const StateRestarting = "restarting"

// VMPoll is how often Compose asks the adapter (<prefix>::worker::status) whether a ready VM
// worker still runs.
var VMPoll = time.Second

// policyState is the restart policy's bookkeeping per container.
type policyState struct {
	mu sync.Mutex
	// failures counts consecutive unexpected exits (the backoff schedule's position).
	failures map[string]int
	// readySince is when the container last became ready.
	readySince map[string]time.Time
	// pending cancels a scheduled restart or a VM watch.
	pending map[string]context.CancelFunc
	watch   map[string]context.CancelFunc
	// gate, when set, serializes a restart with the daemon's mutations.
	gate func() (release func())
}

// Backoff is the restart schedule (supervisor.DefaultBackoff unless a test changes it).
var Backoff = supervisor.DefaultBackoff

// SetGate makes each restart its policy makes wait for, and hold off, the daemon's compose::*
// mutations: gate takes the daemon's mutation lock and returns its release.
func (p *Project) SetGate(gate func() (release func())) {
	p.policy.mu.Lock()
	defer p.policy.mu.Unlock()
	p.policy.gate = gate
}

// optional reports whether key may fail to start without failing the project (required: false).
func optional(f *composefile.File, key string) bool {
	c := f.Containers[key]
	return c != nil && !c.Required
}

func optionalFailed(key string, err error) string {
	e := errcode.As(err, errcode.EngineCallFailed)
	return fmt.Sprintf("container '%s' (required: false) failed to start and the project runs without it: %s: %s", key, e.Code, e.Message)
}

// afterReady notes when key became ready and, for a VM worker, starts watching it.
func (p *Project) afterReady(f *composefile.File, key string) {
	p.policy.mu.Lock()
	if p.policy.readySince == nil {
		p.policy.readySince = map[string]time.Time{}
	}
	p.policy.readySince[key] = time.Now()
	p.policy.mu.Unlock()
	if p.IsVM(key) {
		p.watchVM(f, key)
	}
}

// cancelRestart cancels key's scheduled restart and its VM watch (stop calls it first).
func (p *Project) cancelRestart(key string) {
	p.policy.mu.Lock()
	defer p.policy.mu.Unlock()
	if c := p.policy.pending[key]; c != nil {
		c()
		delete(p.policy.pending, key)
	}
	if c := p.policy.watch[key]; c != nil {
		c()
		delete(p.policy.watch, key)
	}
}

// onExit handles a process that ended without Stop.
func (p *Project) onExit(proc *supervisor.Process) {
	why := "exited"
	err := proc.ExitErr()
	if err != nil {
		why = err.Error()
	}
	p.died(proc.Name, fmt.Sprintf("(pid %d) ", proc.PID), why, err != nil)
}

// died handles a ready container that ended without being asked to: it is reported, everything
// that depends on it is taken down, and its restart policy decides whether it (and the
// dependents it took down) start again after a backoff. failure says the exit was a failure (a
// non-zero status or a signal), which on-failure restarts; always restarts any exit.
func (p *Project) died(key, pidNote, why string, failure bool) {
	f := p.File()
	c := f.Containers[key]
	if c == nil || p.state(key) != StateReady {
		return
	}
	restart := c.Restart == composefile.RestartAlways || (c.Restart == composefile.RestartOnFailure && failure)
	now := time.Now()
	state := StateFailed
	if restart {
		state = StateRestarting
	}
	p.setState(key, func(ct *Container) {
		ct.State, ct.PID, ct.LastError = state, 0, fmt.Sprintf("exited unexpectedly (%s)", why)
	})
	p.Progress(key, "Exited")
	p.persist()
	var running []string
	for _, d := range Dependents(f, key) {
		if p.running(d) {
			running = append(running, d)
		}
	}
	if len(running) == 0 {
		p.printf("container '%s' %sexited unexpectedly (%s)", key, pidNote, why)
	} else {
		p.printf("container '%s' %sexited unexpectedly (%s); stopping its dependents: %s", key, pidNote, why, strings.Join(running, ", "))
		for _, d := range running {
			// The reason goes in first, so compose::status never shows the dependent stopped
			// without it.
			p.setState(d, func(c *Container) { c.LastError = fmt.Sprintf("stopped because '%s' exited", key) })
			p.stop(context.Background(), f, d)
		}
	}
	if !restart {
		return
	}
	p.policy.mu.Lock()
	if p.policy.failures == nil {
		p.policy.failures, p.policy.pending = map[string]int{}, map[string]context.CancelFunc{}
	}
	n := Backoff.Failures(p.policy.failures[key], p.policy.readySince[key], now)
	p.policy.failures[key] = n
	ctx, cancel := context.WithCancel(context.Background())
	if old := p.policy.pending[key]; old != nil {
		old()
	}
	p.policy.pending[key] = cancel
	gate := p.policy.gate
	p.policy.mu.Unlock()
	delay := Backoff.Delay(n)
	p.printf("container '%s' restarts in %v (restart: %s)", key, delay, c.Restart)
	go p.restartLoop(ctx, key, running, delay, n, gate)
}

// restartLoop starts key again after delay, then the dependents died took down; a start that
// fails waits the next delay of the schedule and tries again, until the restart is cancelled.
func (p *Project) restartLoop(ctx context.Context, key string, dependents []string, delay time.Duration, n int, gate func() func()) {
	for {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		release := func() {}
		if gate != nil {
			release = gate()
		}
		if ctx.Err() != nil || p.state(key) != StateRestarting {
			release()
			return
		}
		f := p.File()
		if f.Containers[key] == nil {
			release()
			return
		}
		p.setState(key, func(c *Container) { c.Restarts++ })
		err := p.start(ctx, f, key)
		if err == nil {
			for _, d := range orderOf(f, dependents) {
				if f.Containers[d] != nil && !p.running(d) {
					if derr := p.start(ctx, f, d); derr != nil {
						p.Warn(fmt.Sprintf("container '%s' did not start again after '%s' restarted: %v", d, key, derr))
					}
				}
			}
			p.policy.mu.Lock()
			delete(p.policy.pending, key)
			p.policy.mu.Unlock()
			release()
			return
		}
		p.setState(key, func(c *Container) { c.State = StateRestarting })
		release()
		n++
		p.policy.mu.Lock()
		p.policy.failures[key] = n
		p.policy.mu.Unlock()
		delay = Backoff.Delay(n)
		p.printf("container '%s' failed to restart (%v); next try in %v", key, err, delay)
	}
}

// vmStatus is the part of <prefix>::worker::status Compose reads.
type vmStatus struct {
	State    string `json:"state"`
	ExitCode *int   `json:"exit_code"`
}

// watchVM polls the adapter for key's VM until it stops being ready here; a VM the adapter
// reports exited, stopped or absent is handled like a process that exited (req: VM workers
// follow the same restart policy).
func (p *Project) watchVM(f *composefile.File, key string) {
	ctx, cancel := context.WithCancel(context.Background())
	p.policy.mu.Lock()
	if p.policy.watch == nil {
		p.policy.watch = map[string]context.CancelFunc{}
	}
	if old := p.policy.watch[key]; old != nil {
		old()
	}
	p.policy.watch[key] = cancel
	p.policy.mu.Unlock()
	prefix, id := AdapterPrefix(f), p.VMID(key)
	go func() {
		t := time.NewTicker(VMPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if p.state(key) != StateReady {
				return
			}
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			raw, err := p.vmEngine().Call(cctx, prefix+"::worker::status", map[string]any{"vm_id": id})
			ccancel()
			if err != nil {
				continue // the adapter restarting, or the engine busy: ask again
			}
			var st vmStatus
			if json.Unmarshal(raw, &st) != nil {
				continue
			}
			switch st.State {
			case "exited", "stopped", "absent":
			default:
				continue
			}
			if ctx.Err() != nil {
				return
			}
			why := "the adapter reports it " + st.State
			failure := true
			if st.ExitCode != nil {
				why += fmt.Sprintf(", exit status %d", *st.ExitCode)
				failure = *st.ExitCode != 0
			}
			p.policy.mu.Lock()
			delete(p.policy.watch, key)
			p.policy.mu.Unlock()
			p.died(key, "(VM "+id+") ", why, failure)
			return
		}
	}()
}
