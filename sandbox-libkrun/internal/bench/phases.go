package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// bootTimer is what a machine of the qemu driver reports about its boot.
type bootTimer interface{ BootTimes() qemu.BootTimes }

// bootPhases is the driver's breakdown of m's boot, or nil for a machine that has none.
func bootPhases(m vm.Machine) []qemu.Phase {
	if bt, ok := m.(bootTimer); ok {
		return bt.BootTimes().Phases()
	}
	return nil
}

// Breakdown collects the phases of a series of runs: each run is a list of named durations in
// the same order; the summary is the median of each phase.
type Breakdown struct {
	names []string
	runs  map[string][]time.Duration
}

// Add records one run's phases.
func (b *Breakdown) Add(phases []qemu.Phase) {
	if b.runs == nil {
		b.runs = map[string][]time.Duration{}
	}
	for _, p := range phases {
		if _, ok := b.runs[p.Name]; !ok {
			b.names = append(b.names, p.Name)
		}
		b.runs[p.Name] = append(b.runs[p.Name], p.D)
	}
}

// Medians returns each phase's median in the order the phases were first seen.
func (b *Breakdown) Medians() []qemu.Phase {
	var out []qemu.Phase
	for _, n := range b.names {
		out = append(out, qemu.Phase{Name: n, D: summarize(b.runs[n]).Median})
	}
	return out
}

// Print writes the medians as one indented line per phase, with the sum of the medians.
func (b *Breakdown) Print(w io.Writer, title string) {
	med := b.Medians()
	if len(med) == 0 {
		return
	}
	var sum time.Duration
	var parts []string
	for _, p := range med {
		sum += p.D
		parts = append(parts, fmt.Sprintf("%s %d", p.Name, p.D.Milliseconds()))
	}
	fmt.Fprintf(w, "  phases of %s (medians, ms; sum %d): %s\n", title, sum.Milliseconds(), strings.Join(parts, " | "))
}

// runTimes are the timestamps of one sandbox::run as the driver and the machine saw them.
type runTimes struct {
	bootCalled time.Time
	machine    vm.Machine
	fs, exec   time.Duration
}

// runPhases splits one sandbox::run of total duration, started at t0, into the adapter's work
// before the boot, the boot's phases, the file writes, the exec and the rest (the reply's way
// back and the adapter's bookkeeping).
func runPhases(t0 time.Time, total time.Duration, rt *runTimes) []qemu.Phase {
	before := rt.bootCalled.Sub(t0)
	ph := []qemu.Phase{{Name: "call to boot", D: before}}
	boot := bootPhases(rt.machine)
	ph = append(ph, boot...)
	var sum time.Duration = before
	for _, p := range boot {
		sum += p.D
	}
	ph = append(ph, qemu.Phase{Name: "fs::write", D: rt.fs}, qemu.Phase{Name: "exec", D: rt.exec})
	sum += rt.fs + rt.exec
	return append(ph, qemu.Phase{Name: "reply", D: total - sum})
}

// timedMachine times the file operations and execs of a machine into rt.
type timedMachine struct {
	vm.Machine
	mu *sync.Mutex
	rt *runTimes
}

// since adds the time since t to *d, one of rt's fields.
func (m timedMachine) since(d *time.Duration, t time.Time) {
	m.mu.Lock()
	*d += time.Since(t)
	m.mu.Unlock()
}

// Exec runs the command and adds its duration to the run's exec time.
func (m timedMachine) Exec(ctx context.Context, req vm.ExecRequest) (vm.ExecResult, error) {
	t := time.Now()
	res, err := m.Machine.Exec(ctx, req)
	m.since(&m.rt.exec, t)
	return res, err
}

// FS runs the operation and adds its duration to the run's file time.
func (m timedMachine) FS(ctx context.Context, op string, req json.RawMessage) (json.RawMessage, error) {
	t := time.Now()
	res, err := m.Machine.FS(ctx, op, req)
	m.since(&m.rt.fs, t)
	return res, err
}

// timedStreamer is a timedMachine whose machine streams files: fs::read and fs::write of the
// bench's fs section go through it, so the wrapper must not hide vm.FSStreamer.
type timedStreamer struct {
	timedMachine
	st vm.FSStreamer
}

var _ vm.FSStreamer = timedStreamer{}

// FSRead starts the streamed read on the wrapped machine.
func (m timedStreamer) FSRead(ctx context.Context, req json.RawMessage) (json.RawMessage, io.ReadCloser, error) {
	return m.st.FSRead(ctx, req)
}

// FSWrite runs the streamed write on the wrapped machine and adds its duration to the file time.
func (m timedStreamer) FSWrite(ctx context.Context, req json.RawMessage, body io.Reader) (json.RawMessage, error) {
	t := time.Now()
	res, err := m.st.FSWrite(ctx, req, body)
	m.since(&m.rt.fs, t)
	return res, err
}

// Prestart passes a warm pool's prestart on to the wrapped machine (vm.Prestarter).
func (m timedStreamer) Prestart(ctx context.Context, argv0 string) error {
	p, ok := m.timedMachine.Machine.(vm.Prestarter)
	if !ok {
		return errors.New("the machine cannot prestart an interpreter")
	}
	return p.Prestart(ctx, argv0)
}

// timedProcesses is a timedStreamer whose machine runs long-lived processes: the process
// section goes through it, so the wrapper must not hide vm.Processes either.
type timedProcesses struct {
	timedStreamer
	vm.Processes
}

// timedDialer is a timedProcesses whose machine dials guest ports: the expose section goes
// through it, so the wrapper must not hide vm.Dialer.
type timedDialer struct {
	timedProcesses
	vm.Dialer
}

// timed wraps m so that its execs and file operations are timed into rt, keeping vm.FSStreamer,
// vm.Processes and vm.Dialer when m has them.
func timed(m vm.Machine, mu *sync.Mutex, rt *runTimes) vm.Machine {
	tm := timedMachine{Machine: m, mu: mu, rt: rt}
	st, ok := m.(vm.FSStreamer)
	if !ok {
		return tm
	}
	ts := timedStreamer{timedMachine: tm, st: st}
	pm, ok := m.(vm.Processes)
	if !ok {
		return ts
	}
	tp := timedProcesses{timedStreamer: ts, Processes: pm}
	if dm, ok := m.(vm.Dialer); ok {
		return timedDialer{timedProcesses: tp, Dialer: dm}
	}
	return tp
}
