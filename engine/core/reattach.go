package core

import (
	"crypto/subtle"
	"time"

	"github.com/iii-go/iii/internal/base/errcode"
)

// reattachWait bounds how long a reattach frame waits for the previous connection to be
// forgotten, as iii's: the frames after it on the new connection wait meanwhile.
const reattachWait = 5 * time.Second

// reattachFrom serves a reattach frame, which an SDK sends first on a new connection after its
// previous one broke, before it registers its functions and triggers again: as iii does, the
// previous connection is closed and forgotten (its functions, triggers and calls go, as on a
// disconnect) before the next frame is read, so the registrations that follow land on a clean
// slate instead of meeting the previous connection's as duplicates. The new connection keeps
// its own worker id; the worker registers everything again itself.
//
// Who may: only the worker that held the previous connection. Worker ids are public
// (engine::workers::list), so the id alone retires nothing: the frame must carry the reattach
// token the engine sent on that connection's own socket (workerregistered), and the previous
// connection must have come through the same listener. A frame that names no live connection
// (it is gone already, the usual case) does nothing; one with a wrong or missing token, or from
// another listener, is logged at WARN with FORBIDDEN and does nothing, as iii ignores it.
func (e *Engine) reattachFrom(c *conn, prevID, token string) {
	if prevID == "" || prevID == c.id {
		return
	}
	e.mu.RLock()
	old := e.conns[prevID]
	e.mu.RUnlock()
	if old == nil {
		e.log.Debug("reattach: the previous connection is gone already", "worker_id", c.id, "previous_worker_id", prevID)
		return
	}
	if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(old.reattach)) != 1 || old.l != c.l {
		e.log.Warn("ignoring reattach", "code", errcode.Forbidden, "worker_id", c.id, "previous_worker_id", prevID,
			"reason", "the reattach token is missing or not the one sent to that connection, or it came through another listener")
		return
	}
	e.log.Info("reattach: closing the previous connection of a reconnected worker", "worker_id", c.id, "previous_worker_id", prevID, "name", old.name())
	old.kill("", "")
	select {
	case <-old.dropped:
	case <-time.After(reattachWait):
		e.log.Warn("reattach: the previous connection was not forgotten in time; going on", "worker_id", c.id, "previous_worker_id", prevID)
	}
}
