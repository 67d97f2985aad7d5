package adapter

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/internal/jsonfields"
)

// sortedNames returns a sorted copy of names.
func sortedNames(names ...string) []string {
	out := append([]string(nil), names...)
	sort.Strings(out)
	return out
}

// The request and reply fields of sandbox::create, exec, run, list, stop and fs::read are those of
// the 0.25 in-engine daemon, plus only contract 1.1's two truncation
// flags on the exec and run replies (req A4, A5), contract 1.3's snapshot_id of create and paused of list, and
// contract 1.4's network of run and of list. The fs::* requests are the guest agent's
// (guest/fsops), checked there.
func TestFieldsMatchTheReference(t *testing.T) {
	exec10 := []string{"stdout", "stderr", "exit_code", "timed_out", "duration_ms", "success"}
	exec11 := append(append([]string(nil), exec10...), "stdout_truncated", "stderr_truncated")
	for name, c := range map[string]struct {
		typ  reflect.Type
		want []string
	}{
		"create request": {reflect.TypeOf(CreateRequest{}), sortedNames("image", "cpus", "memory_mb", "name", "network", "idle_timeout_secs", "env", "snapshot_id")},
		"create reply":   {reflect.TypeOf(CreateReply{}), sortedNames("sandbox_id", "image")},
		"exec request":   {reflect.TypeOf(ExecRequest{}), sortedNames("sandbox_id", "cmd", "args", "argv", "stdin", "env", "timeout_ms", "workdir")},
		"exec reply":     {reflect.TypeOf(ExecReply{}), sortedNames(exec11...)},
		"run request":    {reflect.TypeOf(RunRequest{}), sortedNames("image", "code", "lang", "files", "env", "stdin", "timeout_ms", "keep_sandbox", "network")},
		"run files[]":    {reflect.TypeOf(RunFile{}), sortedNames("path", "content")},
		"run reply":      {reflect.TypeOf(RunReply{}), sortedNames(append(append([]string(nil), exec11...), "sandbox_id")...)},
		"list sandboxes[]": {reflect.TypeOf(ListEntry{}), sortedNames("sandbox_id", "name", "image", "age_secs", "exec_in_progress",
			"exec_in_flight", "exec_slots_free", "stopped", "paused", "network")},
		"stop request":   {reflect.TypeOf(StopRequest{}), sortedNames("sandbox_id", "wait")},
		"stop reply":     {reflect.TypeOf(StopReply{}), sortedNames("sandbox_id", "stopped")},
		"fs::read reply": {reflect.TypeOf(ReadReply{}), sortedNames("content", "body", "size", "mode", "mtime")},
	} {
		if got := jsonfields.Of(c.typ); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s fields differ from the 0.25 list\n0.25: %s\nnow:  %s", name, strings.Join(c.want, ", "), strings.Join(got, ", "))
		}
	}
}

// The process operations' fields are contract 1.2's, as the engine's router, the Go SDK and the
// Node SDK's callers read them.
func TestProcessFieldsMatchContract12(t *testing.T) {
	for name, c := range map[string]struct {
		typ  reflect.Type
		want []string
	}{
		"process::start request":  {reflect.TypeOf(ProcessStartRequest{}), sortedNames("sandbox_id", "cmd", "args", "argv", "env", "workdir", "timeout_ms", "stdin", "tty", "detached")},
		"tty":                     {reflect.TypeOf(TermRequest{}), sortedNames("rows", "cols")},
		"process::attach request": {reflect.TypeOf(ProcessAttachRequest{}), sortedNames("sandbox_id", "process_id", "stdin")},
		"start/attach reply":      {reflect.TypeOf(ProcessReply{}), sortedNames("process_id", "pid", "stdout", "stderr", "stdin")},
		"process::list processes[]": {reflect.TypeOf(ProcessRow{}), sortedNames("process_id", "pid", "argv", "tty", "state", "exit_code", "signal",
			"timed_out", "started_at_ms", "attached")},
		"wait reply, exit message": {reflect.TypeOf(ProcessStatus{}), sortedNames("type", "exit_code", "signal", "timed_out")},
	} {
		if got := jsonfields.Of(c.typ); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s fields differ from contract 1.2\n1.2: %s\nnow: %s", name, strings.Join(c.want, ", "), strings.Join(got, ", "))
		}
	}
}

// The snapshot operations' fields are contract 1.3's.
func TestSnapshotFieldsMatchContract13(t *testing.T) {
	for name, c := range map[string]struct {
		typ  reflect.Type
		want []string
	}{
		"snapshot request":           {reflect.TypeOf(SnapshotRequest{}), sortedNames("sandbox_id", "name")},
		"snapshot reply":             {reflect.TypeOf(SnapshotReply{}), sortedNames("snapshot_id", "size_bytes")},
		"snapshot::list snapshots[]": {reflect.TypeOf(SnapshotEntry{}), sortedNames("snapshot_id", "name", "image", "source_sandbox_id", "cpus", "memory_mb", "size_bytes", "created_at_ms")},
		"snapshot::delete request":   {reflect.TypeOf(SnapshotDeleteRequest{}), sortedNames("snapshot_id")},
		"fork request":               {reflect.TypeOf(ForkRequest{}), sortedNames("sandbox_id", "count")},
	} {
		if got := jsonfields.Of(c.typ); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s fields differ from contract 1.3\n1.3: %s\nnow: %s", name, strings.Join(c.want, ", "), strings.Join(got, ", "))
		}
	}
}
