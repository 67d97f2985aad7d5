package main

import (
	"io"
	"os"
	"regexp"
	"testing"
)

// TestUsageErrorsExit2 runs a command-line mistake of every part of iii and checks the one way
// they all fail: error[CODE]: message on stderr and exit status 2.
func TestUsageErrorsExit2(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	for _, tc := range []struct {
		args []string
		line string
	}{
		{[]string{"bogus"}, `^error\[UNKNOWN_COMMAND\]: unknown command "bogus"`},
		{[]string{"--bogus"}, `^error\[USAGE\]: flag provided but not defined: -bogus`},
		{[]string{"engine", "extra"}, `^error\[USAGE\]: unexpected argument "extra"`},
		{[]string{"call"}, `^error\[USAGE\]: missing FUNCTION`},
		{[]string{"call", "f", "--timeout-ms", "x"}, `^error\[USAGE\]: --timeout-ms must be a positive integer`},
		{[]string{"compose", "--bogus"}, `^error\[USAGE_ERROR\]: unknown argument "--bogus"`},
		{[]string{"compose", "logs", "--tail", "x"}, `^error\[USAGE_ERROR\]: --tail x`},
		{[]string{"update", "--bogus"}, `^error\[INVALID_ARGUMENTS\]: unknown flag --bogus`},
		{[]string{"sandbox"}, `^error\[USAGE\]: missing COMMAND`},
		{[]string{"sandbox", "shell"}, `^error\[USAGE\]: missing SANDBOX_ID`},
		{[]string{"sandbox", "shell", "sb-1", "--keep"}, `^error\[USAGE\]: --keep applies to a sandbox created with --image`},
		{[]string{"sandbox", "exec", "sb-1"}, `^error\[USAGE\]: missing the command after --`},
		{[]string{"sandbox", "exec", "sb-1", "--bogus", "--", "ls"}, `^error\[USAGE\]: unknown flag --bogus`},
		{[]string{"doctor", "extra"}, `^error\[USAGE\]: iii doctor takes no arguments`},
	} {
		status, stderr := runCaptured(t, tc.args)
		if status != 2 || !regexp.MustCompile(tc.line).MatchString(stderr) {
			t.Errorf("iii %q: exit %d, stderr %q; want 2 and %s", tc.args, status, stderr, tc.line)
		}
	}
}

// runCaptured runs iii with args and returns its exit status and what it wrote to stderr.
func runCaptured(t *testing.T, args []string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	status := run(args, io.Discard)
	os.Stderr = saved
	w.Close()
	out, _ := io.ReadAll(r)
	r.Close()
	return status, string(out)
}
