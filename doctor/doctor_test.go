package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/iii-go/iii/compose/state"
	"github.com/iii-go/iii/internal/base/platform"
)

// write creates path (and its parents) with content.
func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// deadURL is an engine address nobody answers at.
func deadURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "ws://" + addr
}

// hostOK points the adapter's host checks at stand-ins that pass.
func hostOK(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"kvm", "libcap-ng.so.0", "iii-vm-vmlinux", "iii-vm-initramfs.cpio"} {
		write(t, filepath.Join(dir, f), "")
	}
	t.Setenv("III_KVM_DEVICE", filepath.Join(dir, "kvm"))
	t.Setenv("III_LIBCAPNG", filepath.Join(dir, "libcap-ng.so.0"))
	t.Setenv("III_LIB_DIR", dir)
	mkfs := filepath.Join(dir, "mkfs.ext4")
	write(t, mkfs, "")
	if err := os.Chmod(mkfs, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("III_MKFS", mkfs)
}

func opts(home, compose string) Options {
	tg := platform.Parse("x86_64-unknown-linux-gnu")
	return Options{Home: home, BinDir: filepath.Join(home, ".local", "bin"), Exe: filepath.Join(home, "opt", "iii"),
		ComposeFile: compose, Target: &tg, EngineTimeout: 300 * time.Millisecond, LookupEnv: os.LookupEnv}
}

func codes(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Code)
	}
	return out
}

func TestA025HomeGivesEveryLeftover(t *testing.T) {
	t.Setenv("III_URL", deadURL(t))
	t.Setenv("III_COMPOSE_STATE_DIR", "")
	hostOK(t)
	home := t.TempDir()
	for _, p := range []string{".local/bin/iii-worker", ".local/bin/iii-init", "opt/iii-worker", ".iii/lib/iii-init", ".iii/lib/libkrunfw.so", ".iii/managed/w/disk", ".iii/workers/w/bin",
		".iii/workers-bundle/b/x", ".iii/cache/bundles/b.tar.gz", ".iii/cache/images/python/layer", ".iii/logs/w.log", ".iii/pids/w.pid", ".iii/rootfs/r", ".iii/images/i"} {
		write(t, filepath.Join(home, p), "0123456789")
	}
	r, err := Check(context.Background(), opts(home, ""))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Findings {
		rel, _ := filepath.Rel(home, f.Path)
		got = append(got, f.Code+" "+rel)
	}
	want := []string{
		"LEFTOVER_BINARY opt/iii-worker",
		"LEFTOVER_BINARY .local/bin/iii-worker", "LEFTOVER_BINARY .local/bin/iii-init",
		"LEFTOVER_PATH .iii/managed", "LEFTOVER_PATH .iii/workers", "LEFTOVER_PATH .iii/workers-bundle", "LEFTOVER_PATH .iii/cache/bundles",
		"LEFTOVER_PATH .iii/logs", "LEFTOVER_PATH .iii/pids", "LEFTOVER_PATH .iii/lib/iii-init", "LEFTOVER_PATH .iii/rootfs", "LEFTOVER_PATH .iii/images",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("findings (-want +got):\n%s", d)
	}
	if f := r.Findings[3]; f.Size != 10 || !strings.Contains(f.Message, "(10 B)") || f.Fix != "rm -r "+filepath.Join(home, ".iii/managed")+fixByMove {
		t.Errorf("managed: %+v", f)
	}
	if !r.ActionNeeded() || r.EngineReached {
		t.Errorf("action %v engine %v", r.ActionNeeded(), r.EngineReached)
	}
}

const moved = `# the shop
namespace: shop
engine:
  url: ${URL}
  workers:
    iii-sandbox: {default_cpus: 2} # old settings
containers:
  api:
    worker: path://.
    scripts: {run: ./api}
`

func TestProjectFindingsAndFix(t *testing.T) {
	t.Setenv("III_COMPOSE_STATE_DIR", "")
	t.Setenv("URL", deadURL(t))
	hostOK(t)
	home := t.TempDir()
	proj := filepath.Join(home, "shop")
	compose := filepath.Join(proj, "worker-compose.yaml")
	write(t, compose, moved)
	write(t, filepath.Join(proj, "iii.worker.yaml"), "runtime: {base_image: python}\n")
	write(t, filepath.Join(proj, ".iii/compose/shop/vm/api/disk.img"), "disk")
	write(t, filepath.Join(home, ".iii/managed/w/state"), "s")
	o := opts(home, compose)
	r, err := Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(codes(r), " "); got != "LEFTOVER_PATH OLD_VM_STATE SANDBOX_CONFIG_MOVED" {
		t.Fatalf("codes: %s\n%+v", got, r.Findings)
	}
	if f := r.Findings[2]; !f.Fixable || !strings.Contains(f.Message, "config_override:\n      default_cpus: 2") {
		t.Errorf("moved: %+v", f)
	}
	res, err := Fix(r, o, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	trash := filepath.Join(home, ".iii/trash/20260102T030405Z")
	if res.Trash != trash {
		t.Fatalf("trash %s", res.Trash)
	}
	var did []string
	for _, a := range res.Actions {
		did = append(did, a.Code+" "+a.Did)
	}
	sort.Strings(did)
	if got := strings.Join(did, ","); got != "LEFTOVER_PATH moved,OLD_VM_STATE moved,SANDBOX_CONFIG_MOVED rewrote" {
		t.Fatalf("actions %s", got)
	}
	for p, want := range map[string]string{".iii/managed/w/state": "s", "shop/.iii/compose/shop/vm/api/disk.img": "disk"} {
		if b, err := os.ReadFile(filepath.Join(trash, p)); err != nil || string(b) != want {
			t.Errorf("%s in the trash: %q %v", p, b, err)
		}
	}
	after, _ := os.ReadFile(compose)
	if !strings.Contains(string(after), "# the shop") || !strings.Contains(string(after), "# old settings") || !strings.Contains(string(after), "sandbox-libkrun:") {
		t.Errorf("rewritten file:\n%s", after)
	}
	r, err = Check(context.Background(), o)
	if err != nil || len(r.Findings) != 0 {
		t.Fatalf("second run: %v %+v", err, r.Findings)
	}
	restore, _ := os.ReadFile(res.Restore)
	if !strings.Contains(string(restore), "mv "+filepath.Join(trash, ".iii/managed")+" "+filepath.Join(home, ".iii/managed")) {
		t.Errorf("restore.sh:\n%s", restore)
	}
}

func TestAdapterRangeTokenAndPlatform(t *testing.T) {
	t.Setenv("III_COMPOSE_STATE_DIR", "")
	t.Setenv("URL", deadURL(t))
	hostOK(t)
	home := t.TempDir()
	proj := filepath.Join(home, "p")
	compose := filepath.Join(proj, "worker-compose.yaml")
	write(t, compose, "engine: {url: '${URL}'}\ncontainers:\n  sandbox-libkrun: {worker: package://sandbox-libkrun, version: '^0.2'}\n  api: {worker: path://., scripts: {run: ./api}}\n")
	write(t, filepath.Join(proj, "iii.worker.yaml"), "runtime: {base_image: python}\n")
	sha := strings.Repeat("a", 64)
	write(t, filepath.Join(proj, "worker-compose.lock"), "version: 1\ncontainers:\n  sandbox-libkrun:\n    worker: package://sandbox-libkrun\n    requested: '^0.2'\n    resolved:\n      name: sandbox-libkrun\n      version: 0.2.2\n      type: binary\n      artifacts:\n        x86_64-unknown-linux-gnu: {url: a.tar.gz, sha256: "+sha+"}\n")
	o := opts(home, compose)
	r, err := Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(codes(r), " "); got != "ADAPTER_RANGE_0_2 TOKEN_EXPOSED" {
		t.Fatalf("codes %s: %+v", got, r.Findings)
	}
	if f := r.Findings[0]; !strings.Contains(f.Message, "(locked: 0.2.2)") || !strings.Contains(f.Fix, "iii call compose::update") || !strings.Contains(f.Fix, "change the range") {
		t.Errorf("range: %+v", f)
	}
	if f := r.Findings[1]; !strings.Contains(f.Message, "VM worker 'api'") || !strings.Contains(f.Fix, "0.3.1 or later and run iii compose --up") {
		t.Errorf("token: %+v", f)
	}
	musl := platform.Parse("x86_64-unknown-linux-musl")
	o.Target = &musl
	r, _ = Check(context.Background(), o)
	if got := strings.Join(codes(r), " "); got != "UNSUPPORTED_PLATFORM ADAPTER_RANGE_0_2 TOKEN_EXPOSED" {
		t.Fatalf("musl codes %s", got)
	}
}

func TestOn02(t *testing.T) {
	for sel, want := range map[string]bool{"^0.2": true, "0.2.2": true, "~0.2.1": true, "^0.3": false, ">=0.2": false, "latest": false, "0.3.1": false} {
		if got := on02(sel); got != want {
			t.Errorf("on02(%q) = %v", sel, got)
		}
	}
}

func TestHoldersNamesTheProcess(t *testing.T) {
	if !canScan() {
		t.Skip("holders reads /proc, which only Linux has")
	}
	dir := t.TempDir()
	cwd := filepath.Join(dir, "cwd")
	open := filepath.Join(dir, "open")
	write(t, filepath.Join(cwd, "x"), "")
	write(t, filepath.Join(open, "f"), "")
	free := filepath.Join(dir, "free")
	write(t, filepath.Join(free, "x"), "")
	f, err := os.Open(filepath.Join(open, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []*exec.Cmd
	for _, c := range []*exec.Cmd{exec.Command("sleep", "30"), exec.Command("sleep", "30")} {
		cmds = append(cmds, c)
	}
	cmds[0].Dir = cwd
	cmds[1].ExtraFiles = []*os.File{f}
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	h := holders("/proc", []string{cwd, open, free})
	if len(h[cwd]) != 1 || h[cwd][0].PID != cmds[0].Process.Pid || h[cwd][0].How != "working directory" || h[cwd][0].Name != "sleep" {
		t.Errorf("cwd holders %+v", h[cwd])
	}
	if len(h[open]) != 1 || h[open][0].PID != cmds[1].Process.Pid || h[open][0].How != "open file" {
		t.Errorf("open holders %+v", h[open])
	}
	if len(h[free]) != 0 {
		t.Errorf("free holders %+v", h[free])
	}
	if !strings.Contains(h[cwd][0].String(), "(sleep) has "+cwd+" as its working directory") {
		t.Errorf("String %q", h[cwd][0])
	}
}

func TestCLIUsageAndJSON(t *testing.T) {
	t.Setenv("III_URL", deadURL(t))
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--bogus"}, &out, &errb, Options{}, time.Now); code != 2 || !strings.HasPrefix(errb.String(), "error[USAGE]: unknown flag --bogus") {
		t.Fatalf("%d %q", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"-f", "/nonexistent/x.yaml"}, &out, &errb, Options{}, time.Now); code != 2 || !strings.Contains(errb.String(), "no such file") {
		t.Fatalf("%d %q", code, errb.String())
	}
	home := t.TempDir()
	t.Chdir(home)
	out.Reset()
	o := opts(home, "")
	if code := run(context.Background(), []string{"--json"}, &out, &errb, o, time.Now); code != 0 {
		t.Fatalf("clean home: %d\n%s", code, out.String())
	}
	var doc struct {
		Findings []Finding
		Summary  Summary
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || len(doc.Findings) != 0 || doc.Summary.ActionNeeded {
		t.Fatalf("%v %s", err, out.String())
	}
}

func TestOldVMStateUnderTheStateDirVariable(t *testing.T) {
	t.Setenv("III_URL", deadURL(t))
	root := t.TempDir()
	t.Setenv("III_COMPOSE_STATE_DIR", filepath.Join(root, "state"))
	home := filepath.Join(root, "home")
	compose := filepath.Join(root, "proj", "worker-compose.yaml")
	write(t, compose, "containers:\n  api: {worker: path://., scripts: {run: ./api}}\n")
	canon, err := state.Canonical(compose)
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(root, "state", state.Slug(canon), "default", "vm", "api")
	write(t, filepath.Join(old, "disk"), "d")
	write(t, filepath.Join(root, "proj", ".iii/compose/default/vm/w2/disk"), "d")
	write(t, filepath.Join(root, "state", "other-0000abcd", "default", "vm", "x", "disk"), "d")
	r, err := Check(context.Background(), opts(home, compose))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Findings {
		rel, _ := filepath.Rel(root, f.Path)
		got = append(got, f.Code+" "+rel)
	}
	want := []string{"OLD_VM_STATE proj/.iii/compose/default/vm/w2", "OLD_VM_STATE " + filepath.Join("state", state.Slug(canon), "default/vm/api")}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	res, err := Fix(r, opts(home, compose), time.Now())
	if err != nil || len(res.Actions) != 2 || !strings.HasPrefix(res.Actions[1].To, filepath.Join(res.Trash, "root")+"/") {
		t.Fatalf("%v %+v", err, res)
	}
}

// findings lists code and path of each finding, paths relative to root.
func findings(r *Report, root string) []string {
	var out []string
	for _, f := range r.Findings {
		rel, err := filepath.Rel(root, f.Path)
		if err != nil {
			rel = f.Path
		}
		out = append(out, f.Code+" "+rel)
	}
	return out
}

// A symbolic link on the way to a leftover is reported itself, and neither --fix nor the
// advice touches what it leads to (review N5, row B28).
func TestLinksAreReportedNeverFollowed(t *testing.T) {
	t.Setenv("III_URL", deadURL(t))
	root := t.TempDir()
	stateRoot := filepath.Join(root, "state")
	t.Setenv("III_COMPOSE_STATE_DIR", stateRoot)
	home := filepath.Join(root, "home")
	proj := filepath.Join(root, "proj")
	compose := filepath.Join(proj, "worker-compose.yaml")
	write(t, compose, "containers:\n  api: {worker: path://., scripts: {run: ./api}}\n")
	canon, err := state.Canonical(compose)
	if err != nil {
		t.Fatal(err)
	}
	victims := filepath.Join(root, "victims")
	for _, p := range []string{"projA/src/main.go", "projB/notes.txt", "ns/vm/kept/disk", "cache/bundles/b.tar.gz", "managed/w/disk", "slug/default/vm/s/disk"} {
		write(t, filepath.Join(victims, p), "precious")
	}
	link := func(target, at string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	// The review's setup: vm itself; then a namespace, an entry of vm, and under ~/.iii the
	// leftover itself and a directory on its way; the whole slug under III_COMPOSE_STATE_DIR.
	link("../../../../victims", filepath.Join(proj, ".iii/compose/default/vm"))
	link(filepath.Join(victims, "ns"), filepath.Join(proj, ".iii/compose/other"))
	write(t, filepath.Join(proj, ".iii/compose/third/vm/real/disk"), "old")
	link(filepath.Join(victims, "projA"), filepath.Join(proj, ".iii/compose/third/vm/entry"))
	link(filepath.Join(victims, "managed"), filepath.Join(home, ".iii/managed"))
	link(filepath.Join(victims, "cache"), filepath.Join(home, ".iii/cache"))
	link(filepath.Join(victims, "slug"), filepath.Join(stateRoot, state.Slug(canon)))
	// A link that leads to no VM state is left unmentioned.
	link(filepath.Join(victims, "projB"), filepath.Join(proj, ".iii/compose/fourth"))

	o := opts(home, compose)
	r, err := Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"SYMLINK_NOT_FOLLOWED home/.iii/managed",
		"SYMLINK_NOT_FOLLOWED home/.iii/cache",
		"SYMLINK_NOT_FOLLOWED proj/.iii/compose/default/vm",
		"SYMLINK_NOT_FOLLOWED proj/.iii/compose/other",
		"SYMLINK_NOT_FOLLOWED proj/.iii/compose/third/vm/entry",
		"OLD_VM_STATE proj/.iii/compose/third/vm/real",
		"SYMLINK_NOT_FOLLOWED " + filepath.Join("state", state.Slug(canon)),
	}
	if d := cmp.Diff(want, findings(r, root)); d != "" {
		t.Errorf("findings (-want +got):\n%s", d)
	}
	for _, f := range r.Findings {
		if f.Code != SymlinkNotFollowed {
			continue
		}
		if f.Fixable || f.Severity != Warning || f.Fix != "if the link should not be there, remove the link itself, never what it points at: rm "+f.Path ||
			!strings.Contains(f.Message, "a symbolic link to ") {
			t.Errorf("link finding: %+v", f)
		}
	}
	vm := filepath.Join(proj, ".iii/compose/default/vm")
	if f := r.Findings[2]; !strings.HasPrefix(f.Message, "a symbolic link to ../../../../victims ("+victims+") where iii doctor looks for 0.25 VM state") {
		t.Errorf("vm link message: %s", f.Message)
	}

	res, err := Fix(r, o, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Actions) != 1 || res.Actions[0].Code != OldVMState || res.Actions[0].Did != "moved" {
		t.Errorf("actions: %+v", res.Actions)
	}
	if _, err := os.Lstat(vm); err != nil {
		t.Errorf("the link itself was moved: %v", err)
	}
	for _, p := range []string{"projA/src/main.go", "projB/notes.txt", "ns/vm/kept/disk", "cache/bundles/b.tar.gz", "managed/w/disk", "slug/default/vm/s/disk"} {
		if b, err := os.ReadFile(filepath.Join(victims, p)); err != nil || string(b) != "precious" {
			t.Errorf("%s behind a link: %q %v", p, b, err)
		}
	}
}

// Fix checks the path again: a link that appears after Check is not followed either.
func TestFixRefusesALinkThatAppearedAfterCheck(t *testing.T) {
	t.Setenv("III_URL", deadURL(t))
	t.Setenv("III_COMPOSE_STATE_DIR", "")
	root := t.TempDir()
	home := filepath.Join(root, "home")
	proj := filepath.Join(root, "proj")
	compose := filepath.Join(proj, "worker-compose.yaml")
	write(t, compose, "containers:\n  api: {worker: path://., scripts: {run: ./api}}\n")
	write(t, filepath.Join(proj, ".iii/compose/default/vm/api/disk"), "old")
	write(t, filepath.Join(root, "victims/api/disk"), "precious")
	o := opts(home, compose)
	r, err := Check(context.Background(), o)
	if err != nil || len(r.Findings) != 1 {
		t.Fatalf("%v %+v", err, r.Findings)
	}
	vm := filepath.Join(proj, ".iii/compose/default/vm")
	if err := os.Rename(vm, filepath.Join(root, "vm-was")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "victims"), vm); err != nil {
		t.Fatal(err)
	}
	res, err := Fix(r, o, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Actions) != 1 || res.Actions[0].Did != "refused" || !strings.Contains(res.Actions[0].Why, "the symbolic link "+vm+" on its path leads out of "+proj) {
		t.Errorf("actions: %+v", res.Actions)
	}
	if b, err := os.ReadFile(filepath.Join(root, "victims/api/disk")); err != nil || string(b) != "precious" {
		t.Errorf("behind the link: %q %v", b, err)
	}
}

// The printed advice quotes the path for the shell, as restore.sh does (review row B29).
func TestRemoveAdviceIsQuoted(t *testing.T) {
	t.Setenv("III_URL", deadURL(t))
	t.Setenv("III_COMPOSE_STATE_DIR", "")
	root := t.TempDir()
	proj := filepath.Join(root, "proj")
	compose := filepath.Join(proj, "worker-compose.yaml")
	write(t, compose, "containers:\n  api: {worker: path://., scripts: {run: ./api}}\n")
	name := "a'b $(touch PWNED)"
	write(t, filepath.Join(proj, ".iii/compose/default/vm", name, "disk"), "old")
	r, err := Check(context.Background(), opts(filepath.Join(root, "home"), compose))
	if err != nil || len(r.Findings) != 1 {
		t.Fatalf("%v %+v", err, r.Findings)
	}
	want := "rm -r '" + filepath.Join(proj, ".iii/compose/default/vm") + `/a'\''b $(touch PWNED)'` + fixByMove
	if got := r.Findings[0].Fix; got != want {
		t.Errorf("fix:\n got %s\nwant %s", got, want)
	}
	if got := removeCommand("/h/.iii/managed", true); got != "rm -r /h/.iii/managed" {
		t.Errorf("plain path: %s", got)
	}
}

// A host without mkfs.ext4 is an error of the adapter's host checks (MKFS_MISSING), as the
// adapter refuses to start there with VM-worker state disks on; a project whose adapter sets
// worker_disk_mb: 0 needs none.
func TestMkfsMissing(t *testing.T) {
	t.Setenv("III_COMPOSE_STATE_DIR", "")
	t.Setenv("URL", deadURL(t))
	hostOK(t)
	t.Setenv("III_MKFS", filepath.Join(t.TempDir(), "no-mkfs.ext4"))
	home := t.TempDir()
	proj := filepath.Join(home, "p")
	compose := filepath.Join(proj, "worker-compose.yaml")
	write(t, filepath.Join(proj, "iii.worker.yaml"), "runtime: {base_image: python}\n")
	for _, c := range []struct{ override, want string }{
		{"", "MKFS_MISSING"},
		{", config_override: {worker_disk_mb: 0}", ""},
	} {
		write(t, compose, "engine: {url: '${URL}'}\ncontainers:\n  sandbox-libkrun: {worker: package://sandbox-libkrun, version: '^0.3'"+c.override+"}\n  api: {worker: path://., scripts: {run: ./api}}\n")
		r, err := Check(context.Background(), opts(home, compose))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range r.Findings {
			if f.Code == "MKFS_MISSING" {
				got = append(got, f.Code)
				if f.Severity != Error || !strings.Contains(f.Message, "mkfs.ext4 not found") || !strings.Contains(f.Fix, "e2fsprogs") {
					t.Errorf("finding %+v", f)
				}
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("override %q: MKFS findings %v, want %q (all: %v)", c.override, got, c.want, codes(r))
		}
	}
}
