package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/lock"
	"github.com/iii-go/iii/compose/project"
	"github.com/iii-go/iii/compose/state"
)

// Operation states.
const (
	OpAccepted   = "accepted"
	OpRunning    = "running"
	OpSucceeded  = "succeeded"
	OpFailed     = "failed"
	OpCancelling = "cancelling"
	OpCancelled  = "cancelled"
)

// Step is one stage of an operation.
type Step struct {
	Name   string `json:"name"`
	State  string `json:"state"` // running, done, failed, cancelled, rolled_back
	Detail string `json:"detail,omitempty"`
}

// Progress counts an operation's steps.
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// Operation is the snapshot compose::operation returns of an add, remove or update.
type Operation struct {
	OperationID string             `json:"operation_id"`
	Function    string             `json:"function"`
	Requested   []string           `json:"requested"`
	State       string             `json:"state"`
	Steps       []Step             `json:"steps"`
	Progress    Progress           `json:"progress"`
	Result      any                `json:"result,omitempty"`
	Error       *project.CodedBody `json:"error,omitempty"`
	StartedAt   time.Time          `json:"started_at"`
	EndedAt     *time.Time         `json:"ended_at,omitempty"`
}

// maxOperations is how many finished operations compose::operation keeps.
const maxOperations = 100

// opEntry is one operation and what controls it.
type opEntry struct {
	snap   Operation
	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{}
}

// operations is the daemon's table of add, remove and update operations.
type operations struct {
	mu    sync.Mutex
	byID  map[string]*opEntry
	order []string
}

func terminal(state string) bool {
	return state == OpSucceeded || state == OpFailed || state == OpCancelled
}

// stepKey carries an operation's step recorder through its context.
type stepKey struct{}

// step records the start of a named stage of the operation running under ctx (the previous
// stage is then done); it does nothing outside an operation.
func step(ctx context.Context, name string) {
	if rec, ok := ctx.Value(stepKey{}).(func(string)); ok {
		rec(name)
	}
}

// asyncOp runs a compose::add, remove or update as an operation: it takes the daemon's mutation
// lock in the background, records its steps, and can be cancelled. With wait (the default) the
// call answers with the operation's result, as a synchronous call does; with wait=false it
// answers at once with {operation_id, status: accepted, requested}.
func (d *Daemon) asyncOp(fn string, impl func(ctx context.Context, r Request) (any, error)) func(ctx context.Context, r Request) (any, error) {
	return func(callCtx context.Context, r Request) (any, error) {
		e, err := d.ops.begin(fn, r)
		if err != nil {
			return nil, err
		}
		go d.runOp(e, r, impl)
		if r.Wait != nil && !*r.Wait {
			return map[string]any{"operation_id": e.snap.OperationID, "status": OpAccepted, "requested": e.snap.Requested}, nil
		}
		select {
		case <-e.done:
		case <-callCtx.Done():
			return d.ops.snapshot(e), nil
		}
		snap := d.ops.snapshot(e)
		if snap.Error != nil {
			return snap.Result, errcode.New(snap.Error.Code, "%s", snap.Error.Message)
		}
		return snap.Result, nil
	}
}

// begin registers a new operation; a caller-chosen id still running is refused.
func (o *operations) begin(fn string, r Request) (*opEntry, error) {
	id := r.OperationID
	if id == "" {
		id = r.ProgressOperationID
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byID == nil {
		o.byID = map[string]*opEntry{}
	}
	if id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = "op-" + hex.EncodeToString(b[:])
	}
	if old := o.byID[id]; old != nil {
		if !terminal(old.snap.State) {
			return nil, errcode.New(errcode.OperationIDAlreadyExists, "operation '%s' (%s) is still %s; choose another operation_id, or wait for it (compose::operation operation_id=%s)", id, old.snap.Function, old.snap.State, id)
		}
		o.drop(id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &opEntry{ctx: ctx, cancel: cancel, done: make(chan struct{}),
		snap: Operation{OperationID: id, Function: fn, Requested: nonNil(r.workers()), State: OpAccepted,
			Steps: []Step{{Name: "queued", State: "running"}}, StartedAt: time.Now().UTC()}}
	e.snap.Progress = Progress{Total: 1}
	o.byID[id] = e
	o.order = append(o.order, id)
	for len(o.order) > maxOperations {
		if first := o.byID[o.order[0]]; first != nil && !terminal(first.snap.State) {
			break
		}
		o.drop(o.order[0])
	}
	return e, nil
}

func (o *operations) drop(id string) {
	delete(o.byID, id)
	for i, x := range o.order {
		if x == id {
			o.order = append(o.order[:i:i], o.order[i+1:]...)
			break
		}
	}
}

// record starts a new step of e (the running one is then done).
func (o *operations) record(e *opEntry, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range e.snap.Steps {
		if e.snap.Steps[i].State == "running" {
			e.snap.Steps[i].State = "done"
		}
	}
	e.snap.Steps = append(e.snap.Steps, Step{Name: name, State: "running"})
	e.snap.Progress = progress(e.snap.Steps)
}

func progress(steps []Step) Progress {
	p := Progress{Total: len(steps)}
	for _, s := range steps {
		if s.State != "running" {
			p.Done++
		}
	}
	return p
}

func (o *operations) snapshot(e *opEntry) Operation {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := e.snap
	s.Steps = append([]Step(nil), e.snap.Steps...)
	return s
}

func (o *operations) set(e *opEntry, fn func(s *Operation)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fn(&e.snap)
}

// runOp runs impl under the mutation lock; a cancelled operation rolls back what it changed.
func (d *Daemon) runOp(e *opEntry, r Request, impl func(ctx context.Context, r Request) (any, error)) {
	defer close(e.done)
	d.opMu.Lock()
	defer d.opMu.Unlock()
	finish := func(state string, result any, err error, last string) {
		d.ops.set(e, func(s *Operation) {
			for i := range s.Steps {
				if s.Steps[i].State == "running" {
					s.Steps[i].State = last
				}
			}
			now := time.Now().UTC()
			s.State, s.Result, s.EndedAt, s.Progress = state, result, &now, progress(s.Steps)
			if err != nil {
				s.Error = project.Body(err)
			}
		})
	}
	if e.ctx.Err() != nil {
		finish(OpCancelled, nil, errcode.New(errcode.OperationCancelled, "operation '%s' was cancelled before it started; nothing changed", e.snap.OperationID), "cancelled")
		return
	}
	d.ops.set(e, func(s *Operation) { s.State = OpRunning })
	before := d.capture()
	ctx := context.WithValue(e.ctx, stepKey{}, func(name string) { d.ops.record(e, name) })
	step(ctx, "run")
	out, err := impl(ctx, r)
	if e.ctx.Err() == nil {
		if err != nil {
			finish(OpFailed, out, err, "failed")
			return
		}
		finish(OpSucceeded, out, nil, "done")
		return
	}
	d.ops.set(e, func(s *Operation) { s.State = OpCancelling })
	step(ctx, "rollback")
	rerr := d.rollback(before)
	cause := errcode.New(errcode.OperationCancelled, "operation '%s' was cancelled; %s and its lock are back as they were", e.snap.OperationID, before.path)
	if rerr != nil {
		finish(OpFailed, out, rerr, "failed")
		return
	}
	finish(OpCancelled, out, cause, "rolled_back")
}

// before is what an operation may change: the compose file and lock bytes, the file and
// packages the project ran, and which containers were running.
type before struct {
	path, lockPath string
	file, lock     []byte
	hadLock        bool
	fileMode       os.FileMode
	f              *composefile.File
	pkgs           map[string]project.Package
	running        []string
}

func (d *Daemon) capture() before {
	f := d.Project.File()
	b := before{path: f.Path, lockPath: lock.PathFor(f.Path), f: f, pkgs: d.Project.Packages(), fileMode: 0o644}
	b.file, _ = os.ReadFile(b.path)
	if st, err := os.Stat(b.path); err == nil {
		b.fileMode = st.Mode().Perm()
	}
	if data, err := os.ReadFile(b.lockPath); err == nil {
		b.lock, b.hadLock = data, true
	}
	for _, c := range d.Project.Status() {
		if c.State == project.StateReady || c.State == project.StateStarting || c.State == project.StateRestarting {
			b.running = append(b.running, c.Key)
		}
	}
	return b
}

// rollback restores the compose file and lock byte for byte, stops containers the operation
// added, and starts again the containers that ran before it.
func (d *Daemon) rollback(b before) error {
	ctx := context.Background()
	if err := state.WriteFileAtomic(b.path, b.file, b.fileMode); err != nil {
		return errcode.New(errcode.ComposeMutationRollbackFailed, "cancelled, but restoring %s failed: %w", b.path, err)
	}
	if b.hadLock {
		if err := state.WriteFileAtomic(b.lockPath, b.lock, 0o644); err != nil {
			return errcode.New(errcode.ComposeMutationRollbackFailed, "cancelled, but restoring %s failed: %w", b.lockPath, err)
		}
	} else if err := os.Remove(b.lockPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return errcode.New(errcode.ComposeMutationRollbackFailed, "cancelled, but removing %s failed: %w", b.lockPath, err)
	}
	cur := d.Project.File()
	for _, k := range cur.Order {
		if b.f.Containers[k] == nil {
			d.Project.RemoveContainer(ctx, k)
		}
	}
	d.Project.SetFile(b.f, b.pkgs)
	for _, k := range b.running {
		if !d.Project.Running(k) {
			if _, err := d.Project.Up(ctx, k); err != nil {
				d.Project.Warn(fmt.Sprintf("after the rollback, container '%s' did not start again: %v", k, err))
			}
		}
	}
	return nil
}

// lookup finds the operation a compose::operation or compose::cancel names; without an id,
// the newest one.
func (o *operations) lookup(r Request) (*opEntry, error) {
	id := r.OperationID
	if id == "" {
		id = r.ProgressOperationID
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if id == "" && len(o.order) > 0 {
		id = o.order[len(o.order)-1]
	}
	e := o.byID[id]
	if e == nil {
		return nil, errcode.New(errcode.UnknownOperation, "no operation '%s' on this daemon (it keeps the last %d)", id, maxOperations)
	}
	return e, nil
}

func (d *Daemon) operation(_ context.Context, r Request) (any, error) {
	e, err := d.ops.lookup(r)
	if err != nil {
		return nil, err
	}
	return d.ops.snapshot(e), nil
}

// cancel implements compose::cancel: it cancels a running operation, waits for its rollback,
// and reports whether it was cancelled (an operation already over is left as it ended).
func (d *Daemon) cancelOp(ctx context.Context, r Request) (any, error) {
	if r.OperationID == "" && r.ProgressOperationID == "" {
		return nil, errcode.New(errcode.InvalidRequest, "compose::cancel needs operation_id=ID")
	}
	e, err := d.ops.lookup(r)
	if err != nil {
		return nil, err
	}
	e.cancel()
	select {
	case <-e.done:
	case <-ctx.Done():
	}
	s := d.ops.snapshot(e)
	return cancelReply{OperationID: s.OperationID, Cancelled: s.State == OpCancelled, State: s.State}, nil
}
