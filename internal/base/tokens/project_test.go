package tokens

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"ws://127.0.0.1:49134", ""}:        "127.0.0.1_49134_default",
		{"ws://localhost:49134/", "shop"}:   "127.0.0.1_49134_shop",
		{"ws://LOCALHOST:5", "a/b"}:         "127.0.0.1_5_a%2Fb",
		{"wss://example.com", "x"}:          "example.com_443_x",
		{"ws://[::1]:7", "default"}:         "%3A%3A1_7_default",
		{"ws://[0:0::1]:7", "default"}:      "%3A%3A1_7_default",
		{"ws://127.0.0.1:49134", "..%2F.."}: "127.0.0.1_49134_..%252F..",
	} {
		got, err := ProjectKey(in[0], in[1])
		if err != nil || got != want {
			t.Errorf("ProjectKey(%q, %q) = %q, %v; want %q", in[0], in[1], got, err, want)
		}
	}
	if _, err := ProjectKey("http://127.0.0.1:1", "x"); err == nil {
		t.Error("an http URL was accepted")
	}
}

func setup(t *testing.T) (tokenFile string) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokenFile
}

// TestPublishLookupRemove: the file Compose writes is 0600 in a 0700 directory, holds the token
// file's path and not the token, is found from the engine URL and namespace, and is gone after
// remove.
func TestPublishLookupRemove(t *testing.T) {
	tf := setup(t)
	path, remove, err := Publish("ws://localhost:4000", "shop", tf)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "s3cret") || !strings.Contains(string(b), tf) {
		t.Fatalf("file content %s", b)
	}
	if runtime.GOOS != "windows" {
		st, _ := os.Stat(path)
		dst, _ := os.Stat(filepath.Dir(path))
		if st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
			t.Fatalf("modes %v %v", st.Mode(), dst.Mode())
		}
	}
	tok, got, err := LookupProject("ws://127.0.0.1:4000", "shop")
	if err != nil || tok != "s3cret" || got != path {
		t.Fatalf("LookupProject = %q %q %v", tok, got, err)
	}
	if _, _, err := LookupProject("ws://127.0.0.1:4000", "default"); !errors.Is(err, ErrNoProjectToken) {
		t.Fatalf("another namespace: %v", err)
	}
	if _, _, err := LookupProject("ws://127.0.0.1:4001", "shop"); !errors.Is(err, ErrNoProjectToken) {
		t.Fatalf("another port: %v", err)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("still there: %v", err)
	}
	if _, _, err := LookupProject("ws://127.0.0.1:4000", "shop"); !errors.Is(err, ErrNoProjectToken) {
		t.Fatalf("after remove: %v", err)
	}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestStaleFile: a file left by a killed Compose (dead pid) is ignored by LookupProject and swept by
// the next Publish; a replacement by another Compose is not removed by the first one's remove.
func TestStaleFile(t *testing.T) {
	tf := setup(t)
	path, _, err := Publish("ws://127.0.0.1:4000", "shop", tf)
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := json.Marshal(ProjectEntry{PID: deadPID(t), Engine: "ws://127.0.0.1:4000", Namespace: "shop", TokenFile: tf})
	if err := os.WriteFile(path, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LookupProject("ws://127.0.0.1:4000", "shop"); !errors.Is(err, ErrNoProjectToken) {
		t.Fatalf("stale file: %v", err)
	}
	other, remove, err := Publish("ws://127.0.0.1:4001", "dev", tf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale file not swept: %v", err)
	}
	mine, _ := os.ReadFile(other)
	var e ProjectEntry
	_ = json.Unmarshal(mine, &e)
	e.PID = os.Getppid() // another live process took over the file
	b, _ := json.Marshal(e)
	_ = os.WriteFile(other, b, 0o600)
	_ = remove()
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("removed another Compose's file: %v", err)
	}
}

// TestHeld: a record is held only by another live process; this process's own, a dead pid's
// and a missing one are not.
func TestHeld(t *testing.T) {
	tf := setup(t)
	if Held("ws://127.0.0.1:4000", "shop") {
		t.Fatal("no record: held")
	}
	path, _, err := Publish("ws://127.0.0.1:4000", "shop", tf)
	if err != nil {
		t.Fatal(err)
	}
	if Held("ws://127.0.0.1:4000", "shop") {
		t.Fatal("own record: held")
	}
	for _, c := range []struct {
		pid  int
		want bool
	}{{os.Getppid(), true}, {deadPID(t), false}} {
		b, _ := json.Marshal(ProjectEntry{PID: c.pid, Engine: "ws://127.0.0.1:4000", Namespace: "shop", TokenFile: tf})
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := Held("ws://localhost:4000", "shop"); got != c.want {
			t.Errorf("record of pid %d: Held = %v, want %v", c.pid, got, c.want)
		}
	}
}

// TestLookupRefusesUntrusted: loose modes and symlinks are refused with the reason, never
// followed, and the token never appears in the error.
func TestLookupRefusesUntrusted(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes on Windows")
	}
	tf := setup(t)
	path, _, err := Publish("ws://127.0.0.1:4000", "shop", tf)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what, want string) {
		t.Helper()
		_, _, err := LookupProject("ws://127.0.0.1:4000", "shop")
		if err == nil || errors.Is(err, ErrNoProjectToken) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v, want an error with %q", what, err, want)
		}
	}
	_ = os.Chmod(path, 0o644)
	check("entry 0644", "must be 0600")
	_ = os.Chmod(path, 0o600)
	_ = os.Chmod(filepath.Dir(path), 0o755)
	check("directory 0755", "must be 0700")
	_ = os.Chmod(filepath.Dir(path), 0o700)
	_ = os.Chmod(tf, 0o640)
	check("token file 0640", "must be 0600")
	_ = os.Chmod(tf, 0o600)
	link := filepath.Join(t.TempDir(), "link")
	_ = os.Symlink(tf, link)
	b, _ := json.Marshal(ProjectEntry{PID: os.Getpid(), TokenFile: link})
	_ = os.WriteFile(path, b, 0o600)
	check("token file symlink", "symlink")
	_ = os.Remove(path)
	_ = os.Symlink(tf, path)
	check("entry symlink", "symlink")
}
