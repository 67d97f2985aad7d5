package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/iii-go/iii/engine/config"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/tokens"
)

func TestParseCallPayloads(t *testing.T) {
	t.Setenv("III_URL", "")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"f"}, `{}`},
		{[]string{"f", "a=10", "name=alice", "ok=true", "v=[1]"}, `{"a":10,"name":"alice","ok":true,"v":[1]}`},
		{[]string{"f", "--json", `[1, "x"]`}, `[1, "x"]`},
		{[]string{"f", `--json={"a":1,"b":2}`, "b=3"}, `{"a":1,"b":3}`},
		{[]string{"f", "s=a=b"}, `{"s":"a=b"}`},
	}
	for _, c := range cases {
		a, err := parseCall(c.args, os.Getenv)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		var got, want any
		_ = json.Unmarshal(a.payload, &got)
		_ = json.Unmarshal([]byte(c.want), &want)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%v: %s", c.args, d)
		}
		if a.url != "ws://127.0.0.1:49134" {
			t.Errorf("url %s", a.url)
		}
	}
	for _, bad := range [][]string{{}, {"f", "x"}, {"f", "=1"}, {"f", "--json", "{"}, {"f", "--json", "[]", "a=1"}, {"f", "--timeout-ms", "0"}, {"f", "--port"}} {
		if _, err := parseCall(bad, os.Getenv); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestParseCallAddress(t *testing.T) {
	t.Setenv("III_URL", "ws://example.invalid:1")
	a, _ := parseCall([]string{"f"}, os.Getenv)
	if a.url != "ws://example.invalid:1" {
		t.Errorf("III_URL not honoured: %s", a.url)
	}
	a, _ = parseCall([]string{"f", "--port", "5", "-n", "ns"}, os.Getenv)
	if a.url != "ws://127.0.0.1:5" || *a.namespace != "ns" {
		t.Errorf("flags: %s %v", a.url, a.namespace)
	}
}

func TestNoConfigFileMeansDefaults(t *testing.T) {
	dir := t.TempDir()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	r, w, _ := os.Pipe()
	stderr := os.Stderr
	os.Stderr = w
	cfg, err := loadConfig("", os.LookupEnv)
	w.Close()
	os.Stderr = stderr
	out, _ := readAll(r)
	if cfg == nil || err != nil || cfg.Main().Port != 49134 || cfg.Sandbox != nil {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	if !strings.Contains(out, "no config.yaml found in") || !strings.Contains(out, "starting with defaults") {
		t.Errorf("message: %q", out)
	}
	if cfg, err := loadConfig(filepath.Join(dir, "missing.yaml"), os.LookupEnv); cfg != nil || errcode.CodeOf(err) != errcode.ConfigNotFound {
		t.Errorf("an explicit missing file must fail with %s, got %v", errcode.ConfigNotFound, err)
	}
}

func readAll(f *os.File) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil
		}
	}
}

// TestSIGTERMStopsTheEngine: SIGTERM (like SIGINT) ends RunEngine with exit code 0.
func TestSIGTERMStopsTheEngine(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows cannot send a process SIGTERM")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	_ = os.WriteFile(cfg, []byte(fmt.Sprintf("workers:\n  - name: iii-worker-manager\n    config: {host: 127.0.0.1, port: %d}\n  - name: configuration\n    config: {adapter: {name: fs, config: {directory: %s}}}\n", port, filepath.Dir(cfg))), 0o644)
	code := make(chan int, 1)
	go func() { code <- RunEngine("test", []string{"--config", cfg}, nil, os.LookupEnv) }()
	enginetest.Eventually(t, "the engine to listen", 10*time.Second, func() bool {
		select {
		case rc := <-code:
			t.Fatalf("engine exited early with %d", rc)
		default:
		}
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := self.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case rc := <-code:
		if rc != 0 {
			t.Fatalf("exit code %d", rc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("engine did not stop on SIGTERM")
	}
}

// TestUserToken: iii call presents the project token Compose recorded for the engine URL and
// the call's namespace, only when neither III_TOKEN_FILE nor III_TOKEN is set, and never one
// from a record it cannot trust.
func TestUserToken(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("III_URL", "ws://127.0.0.1:4567")
	t.Setenv("III_TOKEN_FILE", "")
	t.Setenv("III_TOKEN", "")
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte("proj-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec, remove, err := tokens.Publish("ws://127.0.0.1:4567", "shop", tf)
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	parse := func(args ...string) *callArgs {
		a, err := parseCall(args, os.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if got := userToken(parse("compose::status", "-n", "shop")); got != "proj-token" {
		t.Errorf("recorded namespace: %q", got)
	}
	if got := userToken(parse("compose::status")); got != "" {
		t.Errorf("default has no record: %q", got)
	}
	if got := userToken(parse("compose::status", "-n", "shop", "--port", "4568")); got != "" {
		t.Errorf("another engine: %q", got)
	}
	t.Setenv("III_TOKEN", "explicit")
	if got := userToken(parse("compose::status", "-n", "shop")); got != "" {
		t.Errorf("III_TOKEN set: %q", got)
	}
	t.Setenv("III_TOKEN", "")
	if err := os.Chmod(rec, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := userToken(parse("compose::status", "-n", "shop")); got != "" {
		t.Errorf("a record readable by others was used: %q", got)
	}
}

// TestListenNamesTheListener: a listener whose port is taken fails LISTEN_FAILED naming it and
// its line in config.yaml.
func TestListenNamesTheListener(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	cfg, err := config.Parse([]byte(fmt.Sprintf("workers:\n  - name: iii-worker-manager\n    config: {port: 0}\n  - name: iii-worker-manager#public\n    config: {port: %d}\n", port)),
		func(string) (string, bool) { return "", false }, ".")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Path = "config.yaml"
	_, err = listen(cfg)
	ce := errcode.As(err, "")
	if ce.Code != errcode.ListenFailed || !strings.Contains(ce.Message, "listener iii-worker-manager#public (config.yaml line 4)") {
		t.Fatalf("got %v", err)
	}
}
