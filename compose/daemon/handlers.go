package daemon

import (
	"context"
	"sync"
)

// Function ids of the logs, listing and operation requests.
const (
	FnLogs      = "compose::logs"
	FnList      = "compose::list"
	FnSchema    = "compose::schema"
	FnOperation = "compose::operation"
	FnCancel    = "compose::cancel"
)

// moreHandlers are the compose::* functions of logs.go, list.go, schema.go and operations.go,
// registered by Register with the same request checks as the others.
func (d *Daemon) moreHandlers() map[string]struct {
	desc string
	fn   func(ctx context.Context, r Request) (any, error)
	mut  bool
} {
	return map[string]struct {
		desc string
		fn   func(ctx context.Context, r Request) (any, error)
		mut  bool
	}{
		FnLogs:      {"A snapshot of the workers' logs (tail), or what they wrote after a cursor (cursors, wait_ms)", d.logs, false},
		FnList:      {"The daemon and the projects it runs", d.list, false},
		FnOperation: {"A snapshot of an add, remove or update operation (operation_id; the newest without one)", d.operation, false},
		FnCancel:    {"Cancel an operation and roll back what it changed", d.cancelOp, false},
		// add, remove and update run as operations (operations.go): they take the mutation
		// lock themselves, so that they can answer at once (wait=false) and be cancelled.
		FnAdd:    {"Add workers to the compose file and start them (wait=false: answer at once with an operation_id)", d.asyncOp(FnAdd, d.add), false},
		FnRemove: {"Remove workers from the compose file and stop them (wait=false: answer at once with an operation_id)", d.asyncOp(FnRemove, d.remove), false},
		FnUpdate: {"Update package workers, worker=NAME[@VERSION] or all (wait=false: answer at once with an operation_id)", d.asyncOp(FnUpdate, d.update), false},
		FnSchema: {"Request and response schemas of the compose::* functions; function_id=worker-compose.yaml gives the file's JSON Schema and an example", d.schema, false},
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
