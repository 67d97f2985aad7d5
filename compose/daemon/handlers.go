package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/iii-go/iii/compose/project"
)

// Function ids served by the daemon.
const (
	FnUp        = "compose::up"
	FnDown      = "compose::down"
	FnStatus    = "compose::status"
	FnRestart   = "compose::restart"
	FnUpdate    = "compose::update"
	FnAdd       = "compose::add"
	FnRemove    = "compose::remove"
	FnStop      = "compose::stop"
	FnValidate  = "compose::validate"
	FnLogs      = "compose::logs"
	FnList      = "compose::list"
	FnSchema    = "compose::schema"
	FnOperation = "compose::operation"
	FnCancel    = "compose::cancel"
)

// function is one compose::* function: what Register gives the engine and what compose::schema
// documents of it, as iii's Compose documents them.
type function struct {
	// desc is the description registered with the engine.
	desc string
	// schemaDesc is compose::schema's description when it is shorter than desc; empty: desc.
	schemaDesc string
	// fields name the request's fields (fieldSchemas); response is a value of the reply's type.
	fields     []string
	response   any
	timeout    time.Duration
	idempotent bool
	handler    func(ctx context.Context, r Request) (any, error)
	// mut makes Register hold the mutation lock around handler. add, remove and update take
	// it themselves (operations.go), so that they can answer at once (wait=false) and be
	// cancelled.
	mut bool
}

// description is what compose::schema says f does.
func (f function) description() string {
	if f.schemaDesc != "" {
		return f.schemaDesc
	}
	return f.desc
}

// functions is every compose::* function the daemon serves, keyed by id.
func (d *Daemon) functions() map[string]function {
	base := []string{"namespace", "file"}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	const long, short = 600 * time.Second, 10 * time.Second
	return map[string]function{
		FnUp: {desc: "Start the project, or a container and what it depends on",
			fields: with("container"), response: project.Result{}, timeout: long, idempotent: true,
			handler: d.up, mut: true},
		FnDown: {desc: "Stop the project, or a container and its dependents",
			fields: with("container"), response: project.Result{}, timeout: 60 * time.Second, idempotent: true,
			handler: d.down, mut: true},
		FnStatus: {desc: "The project's containers and their state",
			fields: with(), response: Status{}, timeout: short, idempotent: true,
			handler: d.status},
		FnList: {desc: "The daemon and the projects it runs",
			fields: []string{"namespace"}, response: ListReply{}, timeout: short, idempotent: true,
			handler: d.list},
		FnLogs: {desc: "A snapshot of the workers' logs (tail), or what they wrote after a cursor (cursors, wait_ms)",
			schemaDesc: "The workers' logs: a snapshot, or what they wrote after a cursor",
			fields:     with("container", "worker", "cursors", "tail", "stream", "wait_ms"), response: LogsReply{}, timeout: short, idempotent: true,
			handler: d.logs},
		FnValidate: {desc: "Check the compose file without starting anything",
			fields: with(), response: validateReply{}, timeout: short, idempotent: true,
			handler: d.validate},
		FnAdd: {desc: "Add workers to the compose file and start them (wait=false: answer at once with an operation_id)",
			schemaDesc: "Add workers to the compose file and start them",
			fields:     with("worker", "workers", "operation_id", "wait"), response: AddResult{}, timeout: long,
			handler: d.asyncOp(FnAdd, d.add)},
		FnRemove: {desc: "Remove workers from the compose file and stop them (wait=false: answer at once with an operation_id)",
			schemaDesc: "Remove workers from the compose file and stop them",
			fields:     with("worker", "workers", "operation_id", "wait"), response: RemoveResult{}, timeout: long, idempotent: true,
			handler: d.asyncOp(FnRemove, d.remove)},
		FnRestart: {desc: "Restart a container, or re-read the compose file and restart the project",
			fields: with("container", "worker"), response: project.RestartResult{}, timeout: long,
			handler: d.restart, mut: true},
		FnUpdate: {desc: "Update package workers, worker=NAME[@VERSION] or all (wait=false: answer at once with an operation_id)",
			schemaDesc: "Update package workers (worker=NAME[@VERSION] or all)",
			fields:     with("worker", "operation_id", "wait"), response: UpdateResult{}, timeout: long,
			handler: d.asyncOp(FnUpdate, d.update)},
		FnStop: {desc: "Stop the daemon, its workers and its managed engine",
			fields: []string{"namespace"}, response: stopReply{}, timeout: 30 * time.Second,
			handler: d.stop},
		FnSchema: {desc: "Request and response schemas of the compose::* functions; function_id=worker-compose.yaml gives the file's JSON Schema and an example",
			fields: []string{"namespace", "function_id"}, response: SchemaReply{}, timeout: short, idempotent: true,
			handler: d.schema},
		FnOperation: {desc: "A snapshot of an add, remove or update operation (operation_id; the newest without one)",
			schemaDesc: "A snapshot of an add, remove or update operation",
			fields:     []string{"namespace", "operation_id", "progress_operation_id"}, response: Operation{}, timeout: short, idempotent: true,
			handler: d.operation},
		FnCancel: {desc: "Cancel an operation and roll back what it changed",
			fields: []string{"namespace", "operation_id", "progress_operation_id"}, response: cancelReply{}, timeout: short, idempotent: true,
			handler: d.cancelOp},
	}
}

// gateRestarts makes the restarts of the project's restart policy take turns with the
// compose::* mutations, so that neither starts or stops a container under the other.
func (d *Daemon) gateRestarts() {
	if d.Project == nil {
		return
	}
	d.Project.SetGate(func() func() {
		d.opMu.Lock()
		var once sync.Once
		return func() { once.Do(d.opMu.Unlock) }
	})
}
