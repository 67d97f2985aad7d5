package sandboxcli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/protocol/processtest"
)

func runExecCmd(t *testing.T, stdin *os.File, args ...string) (int, string, string) {
	t.Helper()
	if stdin == nil {
		var err error
		if stdin, err = os.Open(os.DevNull); err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
	}
	var out, errb bytes.Buffer
	code := Run(append([]string{"exec"}, args...), func(string) string { return "" }, IO{Stdin: stdin, Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

// exec streams stdout and stderr apart, passes argv, env and workdir, and exits with the
// command's code; with -i it sends stdin.
func TestExec(t *testing.T) {
	fake := processtest.Start(t, map[string]processtest.Program{
		"report": func(p *processtest.Proc) protocol.ProcessExit {
			fmt.Fprintf(p.Stdout(), "argv=%q env=%s\n", p.Argv, p.Env["GREETING"])
			fmt.Fprint(p.Stderr(), "to stderr\n")
			return processtest.Exit(4)
		},
		"cat": processtest.Cat,
	}, "sb-1")
	code, out, errOut := runExecCmd(t, nil, "sb-1", "--engine", fake.URL, "-e", "GREETING=hello", "--", "report", "a b", "--flag")
	if code != 4 || out != "argv=[\"report\" \"a b\" \"--flag\"] env=hello\n" || errOut != "to stderr\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	in := filepath.Join(t.TempDir(), "in")
	big := strings.Repeat("line of input\n", 100000)
	if err := os.WriteFile(in, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code, out, errOut = runExecCmd(t, f, "sb-1", "-i", "--engine="+fake.URL, "--", "cat")
	if code != 0 || out != big || errOut != "" {
		t.Fatalf("exit %d, %d bytes of stdout (want %d), stderr %q", code, len(out), len(big), errOut)
	}
}

// A sandbox error keeps its S-code on the error line; no engine is ENGINE_UNREACHABLE.
func TestExecErrors(t *testing.T) {
	fake := processtest.Start(t, nil, "sb-1")
	code, _, errOut := runExecCmd(t, nil, "sb-404", "--engine", fake.URL, "--", "ls")
	if code != 1 || !strings.HasPrefix(errOut, "error[S002]: sandbox::process::start: sandbox not found: sb-404") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	fake.Close()
	code, _, errOut = runExecCmd(t, nil, "sb-1", "--engine", fake.URL, "--", "ls")
	if code != 1 || !strings.HasPrefix(errOut, "error[ENGINE_UNREACHABLE]: no engine answered at "+fake.URL) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var help bytes.Buffer
	if Run([]string{"exec", "--help"}, os.Getenv, IO{Stdin: os.Stdin, Stdout: &help, Stderr: io.Discard}) != 0 || !strings.Contains(help.String(), "Usage: iii sandbox exec") {
		t.Fatalf("help %q", help.String())
	}
}
