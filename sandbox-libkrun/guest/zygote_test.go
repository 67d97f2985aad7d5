//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// A prestarted python3 runs only `python3 script [args]` of a readable file whose environment
// leaves its start-up as it was.
func TestServesExec(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "run.py")
	if err := os.WriteFile(script, []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		ex   proto.Exec
		want bool
	}{
		{"script", proto.Exec{Argv: []string{"python3", script, "a"}, Env: []string{"X=1"}}, true},
		{"relative to the workdir", proto.Exec{Argv: []string{"python3", "run.py"}, Workdir: dir}, true},
		{"the default PATH given", proto.Exec{Argv: []string{"python3", script}, Env: []string{"PATH=" + defaultPath}}, true},
		{"another interpreter", proto.Exec{Argv: []string{"python3.11", script}}, false},
		{"an option", proto.Exec{Argv: []string{"python3", "-c", "pass"}}, false},
		{"no script", proto.Exec{Argv: []string{"python3"}}, false},
		{"a missing script", proto.Exec{Argv: []string{"python3", filepath.Join(dir, "nope.py")}}, false},
		{"a directory", proto.Exec{Argv: []string{"python3", dir}}, false},
		{"a missing workdir", proto.Exec{Argv: []string{"python3", "run.py"}, Workdir: filepath.Join(dir, "nope")}, false},
		{"another PATH", proto.Exec{Argv: []string{"python3", script}, Env: []string{"PATH=/bin"}}, false},
		{"HOME", proto.Exec{Argv: []string{"python3", script}, Env: []string{"HOME=/root"}}, false},
		{"LANG", proto.Exec{Argv: []string{"python3", script}, Env: []string{"LANG=C.UTF-8"}}, false},
		{"LC_ALL", proto.Exec{Argv: []string{"python3", script}, Env: []string{"LC_ALL=C"}}, false},
		{"PYTHONPATH", proto.Exec{Argv: []string{"python3", script}, Env: []string{"PYTHONPATH=/x"}}, false},
		{"a key twice", proto.Exec{Argv: []string{"python3", script}, Env: []string{"X=1", "X=2"}}, false},
		{"a NUL", proto.Exec{Argv: []string{"python3", script, "a\x00b"}}, false},
	}
	for _, c := range cases {
		if got := servesExec("python3", c.ex); got != c.want {
			t.Errorf("%s: servesExec = %v, want %v", c.name, got, c.want)
		}
	}
}
