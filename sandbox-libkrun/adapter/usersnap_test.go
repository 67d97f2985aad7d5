package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

var _ vm.Saver = (*snapDriver)(nil)

// Save saves a fake machine restored on a root disk (one booted over a share is not savable):
// its files hold a word, the returned spec is the machine's.
func (d *snapDriver) Save(_ context.Context, m vm.Machine, dst vm.SnapshotFiles) (vm.Spec, vm.SnapshotInfo, error) {
	spec := m.(*fakeMachine).spec
	if spec.RootDisk == "" {
		return vm.Spec{}, vm.SnapshotInfo{}, fmt.Errorf("%w: its root is served over a file share", vm.ErrNotSavable)
	}
	for _, f := range []string{dst.Machine, dst.RAM} {
		if err := os.WriteFile(f, []byte("SAVED"), 0o600); err != nil {
			return vm.Spec{}, vm.SnapshotInfo{}, err
		}
	}
	return vm.Spec{RootDisk: spec.RootDisk, CPUs: spec.CPUs, MemoryMB: spec.MemoryMB, ScratchMB: spec.ScratchMB, Env: spec.Env},
		vm.SnapshotInfo{KernelRelease: "6.1.0-fake", Size: 10}, nil
}

// Park saves as Save does, but the machine's stream alone (no RAM file), then ends the machine.
func (d *snapDriver) Park(ctx context.Context, m vm.Machine, dst vm.SnapshotFiles) (vm.Spec, vm.SnapshotInfo, error) {
	spec, info, err := d.Save(ctx, m, vm.SnapshotFiles{Machine: dst.Machine, RAM: dst.Machine})
	if err == nil {
		_ = m.Stop(ctx)
	}
	return spec, info, err
}

// call runs op on svc with body and returns its reply as a map or its S-code error.
func svcCall(t *testing.T, svc *Service, op, body string) (map[string]any, *scode.Error) {
	t.Helper()
	reply, err := svc.Handlers()[op](context.Background(), json.RawMessage(body))
	if err != nil {
		e, ok := scode.As(err)
		if !ok {
			t.Fatalf("%s: error is not an S-code envelope: %v", op, err)
		}
		return nil, e
	}
	b, _ := json.Marshal(reply)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m, nil
}

// restoredBox is a sandbox restored from its image's snapshot, with env A=1.
func restoredBox(t *testing.T, svc *Service) (booted, restored *sandbox) {
	t.Helper()
	ctx := context.Background()
	booted, err := svc.create(ctx, CreateRequest{Image: strp("python")})
	if err != nil {
		t.Fatal(err)
	}
	awaitMade(t, svc, 1)
	restored, err = svc.create(ctx, CreateRequest{Image: strp("python"), Env: json.RawMessage(`{"A":"1"}`)})
	if err != nil || !restored.fromSnapshot {
		t.Fatalf("restored create: %v", err)
	}
	return booted, restored
}

// A running sandbox restored from its image's snapshot is saved as a user snapshot (files 0600
// in 0700 directories, listed with its size), restored by create {snapshot_id} with its own
// sandbox id and host name and the saved environment, and deleted; what the snapshot fixes
// cannot be asked otherwise, and a sandbox booted over a file share cannot be saved.
func TestSnapshotOfRunningSandbox(t *testing.T) {
	svc, drv := snapHarness(t)
	booted, box := restoredBox(t, svc)

	if _, e := svcCall(t, svc, "snapshot", `{"sandbox_id":"`+booted.id+`"}`); e == nil || e.Code != scode.S250 || !strings.Contains(e.Message, "file share") {
		t.Fatalf("snapshot of a booted sandbox: %+v, want S250 saying why", e)
	}
	r, e := svcCall(t, svc, "snapshot", `{"sandbox_id":"`+box.id+`","name":"mine"}`)
	if e != nil {
		t.Fatal(e)
	}
	sid := r["snapshot_id"].(string)
	if r["size_bytes"].(float64) <= 0 {
		t.Fatalf("size_bytes: %v", r)
	}
	dir := filepath.Join(svc.users.dir, sid)
	for _, p := range []string{svc.users.dir, dir} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want a 0700 directory", p, err, st.Mode())
		}
	}
	for _, f := range []string{userMachineFile, userRAMFile, userDiskFile, userMetaFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, want a 0600 file", f, err)
		}
	}
	l, e := svcCall(t, svc, "snapshot::list", `{}`)
	if e != nil {
		t.Fatal(e)
	}
	rows := l["snapshots"].([]any)
	if len(rows) != 1 || rows[0].(map[string]any)["name"] != "mine" || rows[0].(map[string]any)["source_sandbox_id"] != box.id || l["total_bytes"].(float64) <= 0 {
		t.Fatalf("list: %v", l)
	}

	c, e := svcCall(t, svc, "create", `{"snapshot_id":"`+sid+`","name":"copy"}`)
	if e != nil {
		t.Fatal(e)
	}
	cid := c["sandbox_id"].(string)
	drv.smu.Lock()
	got := drv.restored[len(drv.restored)-1]
	drv.smu.Unlock()
	if cid == box.id || c["image"] != "python" || !sameFile(got.RootDisk, filepath.Join(dir, userDiskFile)) || got.Hostname != hostname(cid) || len(got.Env) != 1 || got.MemoryMB != 512 {
		t.Fatalf("copy %s: restored with %+v", cid, got)
	}
	for body, key := range map[string]string{
		`{"snapshot_id":"` + sid + `","image":"node"}`:   "image",
		`{"snapshot_id":"` + sid + `","memory_mb":1024}`: "memory_mb",
		`{"snapshot_id":"` + sid + `","network":true}`:   "network",
		`{"snapshot_id":"` + sid + `","env":{"B":"2"}}`:  "env",
		`{"snapshot_id":"not-an-id"}`:                    "snapshot_id",
	} {
		if _, e := svcCall(t, svc, "create", body); e == nil || e.Code != scode.S001 || !strings.Contains(e.Message, key) {
			t.Fatalf("create %s: %+v, want S001 naming %s", body, e, key)
		}
	}
	// The copy can be saved in turn.
	if _, e := svcCall(t, svc, "snapshot", `{"sandbox_id":"`+cid+`"}`); e != nil {
		t.Fatalf("snapshot of a copy: %v", e)
	}
	if _, e := svcCall(t, svc, "snapshot::delete", `{"snapshot_id":"`+sid+`"}`); e != nil {
		t.Fatal(e)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", dir, err)
	}
	for _, op := range []string{"snapshot::delete", "create"} {
		if _, e := svcCall(t, svc, op, `{"snapshot_id":"`+sid+`"}`); e == nil || e.Code != scode.S251 {
			t.Fatalf("%s of a deleted snapshot: %+v, want S251", op, e)
		}
	}
}

// A snapshot that would take the user snapshots past user_snapshots_mb is refused S400 naming
// the setting and leaves nothing behind.
func TestSnapshotBound(t *testing.T) {
	svc, _ := snapHarness(t)
	_, box := restoredBox(t, svc)
	svc.users.limitMB = 0
	if _, e := svcCall(t, svc, "snapshot", `{"sandbox_id":"`+box.id+`"}`); e == nil || e.Code != scode.S400 || !strings.Contains(e.Message, "user_snapshots_mb") {
		t.Fatalf("snapshot past the bound: %+v, want S400", e)
	}
	if ents, _ := os.ReadDir(svc.users.dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// A fork restores count copies of the running sandbox from a temporary snapshot it removes; the
// parent goes on; a count out of range is S001 and the concurrency bound holds.
func TestFork(t *testing.T) {
	svc, drv := snapHarness(t)
	_, box := restoredBox(t, svc)
	drv.smu.Lock()
	before := len(drv.restored)
	drv.smu.Unlock()
	r, e := svcCall(t, svc, "fork", `{"sandbox_id":"`+box.id+`","count":3}`)
	if e != nil {
		t.Fatal(e)
	}
	ids := r["sandbox_ids"].([]any)
	drv.smu.Lock()
	restored := drv.restored[before:]
	drv.smu.Unlock()
	if len(ids) != 3 || len(restored) != 3 {
		t.Fatalf("fork: %v, %d restores", r, len(restored))
	}
	for i, id := range ids {
		if restored[i].Hostname != hostname(id.(string)) || len(restored[i].Env) != 1 {
			t.Fatalf("child %d: %+v", i, restored[i])
		}
		if _, err := svc.admit(id.(string), false); err != nil {
			t.Fatalf("child %s: %v", id, err)
		}
	}
	if _, err := svc.admit(box.id, false); err != nil {
		t.Fatalf("parent: %v", err)
	}
	if ents, _ := os.ReadDir(svc.users.dir); len(ents) != 0 {
		t.Fatalf("the fork's snapshot was left: %v", ents)
	}
	// A child keeps its root disk beyond the fork's snapshot: it can be saved and paused in turn.
	child := ids[0].(string)
	if _, e := svcCall(t, svc, "snapshot", `{"sandbox_id":"`+child+`"}`); e != nil {
		t.Fatalf("snapshot of a child: %+v", e)
	}
	if _, e := svcCall(t, svc, "pause", `{"sandbox_id":"`+child+`"}`); e != nil {
		t.Fatalf("pause of a child: %+v", e)
	}
	for _, body := range []string{`{"sandbox_id":"` + box.id + `","count":0}`, `{"sandbox_id":"` + box.id + `","count":65}`} {
		if _, e := svcCall(t, svc, "fork", body); e == nil || e.Code != scode.S001 || !strings.Contains(e.Message, "count") {
			t.Fatalf("fork %s: %+v, want S001", body, e)
		}
	}
	svc.opt.Settings.MaxConcurrentSandboxes = 7 // 2 + 3 live: room for two more
	if _, e := svcCall(t, svc, "fork", `{"sandbox_id":"`+box.id+`","count":3}`); e == nil || e.Code != scode.S400 {
		t.Fatalf("fork past max_concurrent_sandboxes: %+v, want S400", e)
	}
	l, _ := svcCall(t, svc, "list", `{}`)
	live := 0
	for _, row := range l["sandboxes"].([]any) {
		if !row.(map[string]any)["stopped"].(bool) {
			live++
		}
	}
	if live != 5 {
		t.Fatalf("a refused fork left %d live sandboxes, want 5: %v", live, l)
	}
}

// listRow is the list row of sandbox id.
func listRow(t *testing.T, svc *Service, id string) map[string]any {
	t.Helper()
	l, _ := svcCall(t, svc, "list", `{}`)
	for _, row := range l["sandboxes"].([]any) {
		if r := row.(map[string]any); r["sandbox_id"] == id {
			return r
		}
	}
	t.Fatalf("%s not listed: %v", id, l)
	return nil
}

// Pause ends the sandbox's machine after saving it (list shows it paused, the reaper leaves it);
// a call to it resumes it under the same id and host name; resume and a second pause are
// idempotent; a sandbox booted over a share, or running an exec, is refused S250; stop removes a
// paused one with its files.
func TestPauseResume(t *testing.T) {
	svc, drv := snapHarness(t)
	booted, box := restoredBox(t, svc)
	if _, e := svcCall(t, svc, "pause", `{"sandbox_id":"`+booted.id+`"}`); e == nil || e.Code != scode.S250 {
		t.Fatalf("pause of a booted sandbox: %+v, want S250", e)
	}
	first := box.machine
	r, e := svcCall(t, svc, "pause", `{"sandbox_id":"`+box.id+`"}`)
	if e != nil || r["paused"] != true || r["size_bytes"].(float64) <= 0 {
		t.Fatalf("pause: %v %+v", r, e)
	}
	if !machineDone(first) {
		t.Fatal("a paused sandbox's machine still runs")
	}
	if row := listRow(t, svc, box.id); row["paused"] != true || row["stopped"] != false {
		t.Fatalf("list: %v", row)
	}
	if r, e := svcCall(t, svc, "pause", `{"sandbox_id":"`+box.id+`"}`); e != nil || r["paused"] != true {
		t.Fatalf("second pause: %v %+v", r, e)
	}
	svc.opt.Now = func() time.Time { return time.Now().Add(24 * time.Hour) }
	svc.Reap()
	svc.opt.Now = time.Now
	if row := listRow(t, svc, box.id); row["paused"] != true || row["stopped"] != false {
		t.Fatalf("after a reap: %v", row)
	}
	drv.smu.Lock()
	before := len(drv.restored)
	drv.smu.Unlock()
	// Any call resumes it.
	if _, e := svcCall(t, svc, "exec", `{"sandbox_id":"`+box.id+`","argv":["true"]}`); e != nil {
		t.Fatalf("exec of a paused sandbox: %+v", e)
	}
	drv.smu.Lock()
	got := drv.restored[before:]
	drv.smu.Unlock()
	if len(got) != 1 || got[0].Hostname != hostname(box.id) || filepath.Dir(got[0].RootDisk) != filepath.Join(box.stateDir, "paused-1") || len(got[0].Env) != 1 {
		t.Fatalf("resumed with %+v", got)
	}
	if row := listRow(t, svc, box.id); row["paused"] != false {
		t.Fatalf("list after resume: %v", row)
	}
	if r, e := svcCall(t, svc, "resume", `{"sandbox_id":"`+box.id+`"}`); e != nil || r["resumed"] != true {
		t.Fatalf("resume of a running sandbox: %v %+v", r, e)
	}
	// Paused again, the first pause's files go; resume brings it back.
	if _, e := svcCall(t, svc, "pause", `{"sandbox_id":"`+box.id+`"}`); e != nil {
		t.Fatal(e)
	}
	if _, err := os.Stat(filepath.Join(box.stateDir, "paused-1")); !os.IsNotExist(err) {
		t.Fatalf("the first pause's files are left: %v", err)
	}
	if _, e := svcCall(t, svc, "resume", `{"sandbox_id":"`+box.id+`"}`); e != nil || listRow(t, svc, box.id)["paused"] != false {
		t.Fatalf("resume: %+v", e)
	}
	svc.mu.Lock()
	box.inflight = 1
	svc.mu.Unlock()
	if _, e := svcCall(t, svc, "pause", `{"sandbox_id":"`+box.id+`"}`); e == nil || e.Code != scode.S250 || !strings.Contains(e.Message, "exec") {
		t.Fatalf("pause while an exec runs: %+v, want S250", e)
	}
	svc.mu.Lock()
	box.inflight = 0
	svc.mu.Unlock()
	if _, e := svcCall(t, svc, "pause", `{"sandbox_id":"`+box.id+`"}`); e != nil {
		t.Fatal(e)
	}
	if _, e := svcCall(t, svc, "stop", `{"sandbox_id":"`+box.id+`","wait":true}`); e != nil {
		t.Fatal(e)
	}
	if _, err := os.Stat(box.stateDir); !os.IsNotExist(err) {
		t.Fatalf("a stopped paused sandbox's files are left: %v", err)
	}
	if _, e := svcCall(t, svc, "exec", `{"sandbox_id":"`+box.id+`","argv":["true"]}`); e == nil || e.Code != scode.S004 {
		t.Fatalf("exec of a stopped paused sandbox: %+v, want S004", e)
	}
}

// With idle_action: pause the reaper pauses an idle sandbox that can be saved (a call resumes
// it) and stops one that cannot.
func TestIdlePause(t *testing.T) {
	svc, _ := snapHarness(t)
	booted, box := restoredBox(t, svc)
	svc.opt.Settings.IdleAction = settings.IdlePause
	later := time.Now().Add(24 * time.Hour)
	svc.opt.Now = func() time.Time { return later }
	svc.Reap()
	if !enginetest.Poll(10*time.Second, func() bool {
		return listRow(t, svc, box.id)["paused"] == true && listRow(t, svc, booted.id)["stopped"] == true
	}) {
		t.Fatalf("after the reap: %v, %v", listRow(t, svc, box.id), listRow(t, svc, booted.id))
	}
	if row := listRow(t, svc, box.id); row["stopped"] != false {
		t.Fatalf("the paused sandbox: %v", row)
	}
	if _, e := svcCall(t, svc, "exec", `{"sandbox_id":"`+box.id+`","argv":["true"]}`); e != nil || listRow(t, svc, box.id)["paused"] != false {
		t.Fatalf("exec of an idle-paused sandbox: %+v", e)
	}
}
