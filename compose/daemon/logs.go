package daemon

import (
	"context"
	"slices"
	"time"

	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/supervisor"
)

// compose::logs limits.
const (
	// LogsDefaultTail is how many entries a snapshot returns without tail.
	LogsDefaultTail = 100
	// LogsMaxTail is the most entries one reply returns per worker.
	LogsMaxTail = 1000
	// LogsMaxWait is the longest wait_ms a compose::logs call may wait for new entries.
	LogsMaxWait = 5 * time.Second
	// logsPoll is how often a waiting compose::logs looks at the logs again.
	logsPoll = 50 * time.Millisecond
)

// LogsWorker is one worker's part of the compose::logs reply.
type LogsWorker struct {
	Container string             `json:"container"`
	Entries   []supervisor.Entry `json:"entries"`
	Cursor    supervisor.Cursor  `json:"cursor"`
	Truncated bool               `json:"truncated"`
	// More says the reply stopped at the limit: call again with the cursor for the rest.
	More bool `json:"more,omitempty"`
}

// LogsReply is the reply of compose::logs, one entry per worker in file order.
type LogsReply struct {
	Workers []LogsWorker `json:"workers"`
}

// logs implements compose::logs. Without a cursor for a worker it returns the last tail
// entries of its log (default 100, at most 1000); with one it returns what was written after
// it (at most tail, default 1000), waiting up to wait_ms (at most 5000) for something new
// when nothing is there yet. Each worker's cursor {generation, offset} survives rotation.
func (d *Daemon) logs(ctx context.Context, r Request) (any, error) {
	keys, err := d.logKeys(r)
	if err != nil {
		return nil, err
	}
	if r.Stream != "" && r.Stream != supervisor.StreamStdout && r.Stream != supervisor.StreamStderr {
		return nil, errcode.New(errcode.InvalidRequest, "stream=%q: write stream=stdout or stream=stderr, or leave it out for both", r.Stream)
	}
	if r.Tail != nil && (*r.Tail < 0 || *r.Tail > LogsMaxTail) {
		return nil, errcode.New(errcode.InvalidRequest, "tail=%d: write a number from 0 to %d", *r.Tail, LogsMaxTail)
	}
	wait := time.Duration(r.WaitMS) * time.Millisecond
	if r.WaitMS < 0 || wait > LogsMaxWait {
		return nil, errcode.New(errcode.InvalidRequest, "wait_ms=%d: write a number of milliseconds from 0 to %d", r.WaitMS, LogsMaxWait.Milliseconds())
	}
	for k, c := range r.Cursors {
		if !slices.Contains(keys, k) {
			return nil, errcode.New(errcode.UnknownContainer, "cursors names '%s', which is not a container of %s", k, d.Project.File().Path)
		}
		if err := c.Validate(); err != nil {
			return nil, errcode.New(errcode.InvalidRequest, "cursors.%s: %w", k, err)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		reply, any, err := d.readLogs(keys, r)
		if err != nil {
			return nil, err
		}
		if any || len(r.Cursors) == 0 || !time.Now().Before(deadline) {
			return reply, nil
		}
		select {
		case <-ctx.Done():
			return reply, nil
		case <-d.Stopped:
			return reply, nil
		case <-time.After(min(logsPoll, time.Until(deadline))):
		}
	}
}

// logKeys are the containers a compose::logs call reads: container= or worker=, else all.
func (d *Daemon) logKeys(r Request) ([]string, error) {
	f := d.Project.File()
	name := r.Container
	if ws := r.workers(); name == "" && len(ws) > 0 {
		if len(ws) > 1 {
			return nil, errcode.New(errcode.InvalidRequest, "compose::logs takes one worker, got %d; leave it out for all", len(ws))
		}
		name = ws[0]
	}
	if name == "" {
		return append([]string(nil), f.Order...), nil
	}
	k := containerFor(f, name)
	if k == "" {
		return nil, errcode.New(errcode.UnknownContainer, "container '%s' is not in %s (containers: %v)", name, f.Path, f.Order)
	}
	return []string{k}, nil
}

// readLogs reads each worker's log once; it reports whether any cursor read found entries.
func (d *Daemon) readLogs(keys []string, r Request) (LogsReply, bool, error) {
	reply := LogsReply{Workers: make([]LogsWorker, 0, len(keys))}
	found := false
	for _, k := range keys {
		path := d.Project.LogPath(k)
		var page supervisor.Page
		var err error
		if c, ok := r.Cursors[k]; ok {
			limit := LogsMaxTail
			if r.Tail != nil {
				limit = *r.Tail
			}
			page, err = supervisor.ReadLog(path, supervisor.LogArchives, c, limit, r.Stream)
			found = found || len(page.Entries) > 0 || page.Truncated
		} else {
			n := LogsDefaultTail
			if r.Tail != nil {
				n = *r.Tail
			}
			page, err = supervisor.TailLog(path, supervisor.LogArchives, n, r.Stream)
		}
		if err != nil {
			return reply, false, errcode.New(errcode.IOError, "cannot read %s: %w", path, err)
		}
		reply.Workers = append(reply.Workers, LogsWorker{Container: k, Entries: page.Entries, Cursor: page.Cursor, Truncated: page.Truncated, More: page.More})
	}
	return reply, found, nil
}
