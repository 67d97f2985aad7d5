package daemon

import "context"

// Function ids added by issue 15.
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
		FnLogs: {"A snapshot of the workers' logs (tail), or what they wrote after a cursor (cursors, wait_ms)", d.logs, false},
	}
}
