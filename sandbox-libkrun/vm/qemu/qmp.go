package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// qmp is a connection to qemu's monitor (QMP): one JSON object a line, commands answered in
// order, events in between.
type qmp struct {
	conn net.Conn
	r    *bufio.Reader
}

// qmpMessage is a line qemu sends: a command's return or error, or an event.
type qmpMessage struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// dialQMP connects to the monitor on path (retrying until qemu has created it, or qemu exits)
// and leaves capability negotiation.
func dialQMP(ctx context.Context, path string, qemu *proc) (*qmp, error) {
	conn, err := dialCtrl(ctx, path, qemu)
	if err != nil {
		return nil, fmt.Errorf("qemu monitor: %w", err)
	}
	q := &qmp{conn: conn, r: bufio.NewReader(conn)}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := q.next(); err != nil { // the greeting
		conn.Close()
		return nil, fmt.Errorf("qemu monitor: %w", err)
	}
	if _, err := q.execute("qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) next() (qmpMessage, error) {
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		return qmpMessage{}, err
	}
	var m qmpMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return qmpMessage{}, fmt.Errorf("qemu monitor sent %q: %w", line, err)
	}
	return m, nil
}

// execute runs one command and returns its result; events that arrive first are dropped.
func (q *qmp) execute(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qemu monitor: %s: %w", cmd, err)
	}
	for {
		m, err := q.next()
		if err != nil {
			return nil, fmt.Errorf("qemu monitor: %s: %w", cmd, err)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("qemu monitor: %s: %s", cmd, m.Error.Desc)
		}
		if m.Event == "" {
			return m.Return, nil
		}
	}
}

// awaitMigration reads events until a MIGRATION event says the migration completed; one of
// status "failed" ends the wait with an error.
func (q *qmp) awaitMigration() error {
	for {
		m, err := q.next()
		if err != nil {
			return fmt.Errorf("qemu monitor: waiting for the migration: %w", err)
		}
		if m.Event != "MIGRATION" {
			continue
		}
		var st struct{ Status string }
		if err := json.Unmarshal(m.Data, &st); err != nil {
			return fmt.Errorf("qemu monitor: MIGRATION event: %w", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return errors.New("qemu monitor: the migration " + st.Status)
		}
	}
}

// migrationDone polls query-migrate until the outgoing migration completes or fails.
func (q *qmp) migrationDone(ctx context.Context) error {
	for {
		res, err := q.execute("query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(res, &st); err != nil {
			return fmt.Errorf("qemu monitor: query-migrate: %w", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("qemu monitor: saving the machine %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sendFile hands f to qemu under name (getfd: the descriptor travels beside the command over the
// monitor's Unix socket), for a later fd:name migration.
func (q *qmp) sendFile(name string, f *os.File) error {
	uc, ok := q.conn.(*net.UnixConn)
	if !ok {
		return errors.New("qemu monitor: getfd needs a Unix socket")
	}
	b, err := json.Marshal(map[string]any{"execute": "getfd", "arguments": map[string]any{"fdname": name}})
	if err != nil {
		return err
	}
	if _, _, err := uc.WriteMsgUnix(append(b, '\n'), syscall.UnixRights(int(f.Fd())), nil); err != nil {
		return fmt.Errorf("qemu monitor: getfd: %w", err)
	}
	for {
		m, err := q.next()
		if err != nil {
			return fmt.Errorf("qemu monitor: getfd: %w", err)
		}
		if m.Error != nil {
			return fmt.Errorf("qemu monitor: getfd: %s", m.Error.Desc)
		}
		if m.Event == "" {
			return nil
		}
	}
}

// migrateTo has qemu write its migration stream straight into f (a file or a pipe) through a
// descriptor it is handed, with no copying process in between, and waits until the stream is
// complete. f is closed once qemu holds its own descriptor, so a reader of a pipe sees the end
// of the stream when qemu closes it.
func (q *qmp) migrateTo(ctx context.Context, f *os.File) error {
	err := q.sendFile("snapshot", f)
	f.Close()
	if err != nil {
		return err
	}
	if _, err := q.execute("migrate", map[string]any{"uri": "fd:snapshot"}); err != nil {
		return err
	}
	return q.migrationDone(ctx)
}

// migrateToFile writes the migration stream into the file at path, which exists (its mode is
// kept), as migrateTo does.
func (q *qmp) migrateToFile(ctx context.Context, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	return q.migrateTo(ctx, f)
}

func (q *qmp) Close() error { return q.conn.Close() }
