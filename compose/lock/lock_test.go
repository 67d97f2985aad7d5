package lock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/iii-go/iii/compose/errcode"
)

func sample() *Lock {
	l := New()
	l.Containers["sandbox-libkrun"] = &Entry{Worker: "package://api.workers.iii.dev/sandbox-libkrun", Requested: "^0.3",
		Resolved: Resolved{Name: "sandbox-libkrun", Version: "0.3.1", Type: "binary",
			Artifacts:     map[string]Artifact{"x86_64-unknown-linux-gnu": {URL: "file:///r/a.tar.gz", SHA256: strings.Repeat("a", 64)}},
			DefaultConfig: map[string]any{"auto_install": true}}}
	return l
}

func TestRoundTripAndWriteOnlyOnChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker-compose.lock")
	if _, err := Read(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing lock: %v", err)
	}
	changed, err := Write(path, sample())
	if err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sample(), got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", st.Mode())
	}
	if changed, err := Write(path, got); err != nil || changed {
		t.Fatalf("identical write rewrote the file: %v %v", changed, err)
	}
}

func TestInvalid(t *testing.T) {
	for name, src := range map[string]string{
		"version":  "version: 2\n",
		"unknown":  "version: 1\nextra: 1\n",
		"kind":     "version: 1\ncontainers:\n  a: {worker: package://a, requested: '1', resolved: {name: a, version: 1.0.0, type: engine, artifacts: {t: {url: u, sha256: " + strings.Repeat("a", 64) + "}}}}\n",
		"name":     "version: 1\ncontainers:\n  a: {worker: package://a, requested: '1', resolved: {name: b, version: 1.0.0, type: binary, artifacts: {t: {url: u, sha256: " + strings.Repeat("a", 64) + "}}}}\n",
		"digest":   "version: 1\ncontainers:\n  a: {worker: package://a, requested: '1', resolved: {name: a, version: 1.0.0, type: binary, artifacts: {t: {url: u, sha256: abc}}}}\n",
		"path":     "version: 1\ncontainers:\n  a: {worker: path://a, requested: '1', resolved: {name: a, version: 1.0.0, type: binary, artifacts: {t: {url: u, sha256: abc}}}}\n",
		"not yaml": "version: [\n",
	} {
		if _, err := Parse("/p/worker-compose.lock", []byte(src)); errcode.CodeOf(err) != errcode.InvalidComposeLock || !strings.Contains(err.Error(), "/p/worker-compose.lock") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCheck(t *testing.T) {
	l := sample()
	ok := []Want{{"sandbox-libkrun", "package://api.workers.iii.dev/sandbox-libkrun", "^0.3"}}
	if err := l.Check("x.lock", ok); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]Want{
		"container 'sandbox-libkrun' changed from package://api.workers.iii.dev/sandbox-libkrun@^0.3 to package://api.workers.iii.dev/sandbox-libkrun@^0.2": {{"sandbox-libkrun", "package://api.workers.iii.dev/sandbox-libkrun", "^0.2"}},
		"container 'state' is missing from the lock":          append(ok, Want{"state", "package://state", "1"}),
		"container 'sandbox-libkrun' exists only in the lock": nil,
	}
	for want, wants := range cases {
		err := l.Check("x.lock", wants)
		if errcode.CodeOf(err) != errcode.ComposeLockOutOfDate || !strings.Contains(err.Error(), "x.lock does not match its compose file: "+want) {
			t.Errorf("want %q, got %v", want, err)
		}
	}
	if PathFor("/a/config/worker-compose.yaml") != "/a/config/worker-compose.lock" {
		t.Error("PathFor")
	}
}

func TestIIILineMustBeAVersionLine(t *testing.T) {
	const entry = "version: 1\ncontainers:\n  state:\n    worker: package://state\n    requested: 0.22.2\n    resolved:\n      name: state\n      version: 0.1.0\n      type: binary\n      iii_line: %s\n      artifacts:\n        x86_64-unknown-linux-gnu: {url: u, sha256: " + "%s}\n"
	sum := strings.Repeat("a", 64)
	l, err := Parse("w.lock", []byte(fmt.Sprintf(entry, `"0.22"`, sum)))
	if err != nil || !l.Containers["state"].Mapped() {
		t.Fatalf("a mapped entry: %v", err)
	}
	if _, err := Parse("w.lock", []byte(fmt.Sprintf(entry, "latest", sum))); errcode.CodeOf(err) != errcode.InvalidComposeLock || !strings.Contains(err.Error(), `resolved.iii_line "latest"`) {
		t.Fatalf("a bad line: %v", err)
	}
}
