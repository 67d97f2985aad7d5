package testscripts

import (
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	registerCmd("envfile", cmdEnvFile)
}

// envfile VAR FILE: set VAR to the content of FILE with surrounding white space trimmed (the
// composerun scenarios read the project token this way to grep for it).
func cmdEnvFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: envfile VAR FILE")
	}
	v := strings.TrimSpace(ts.ReadFile(args[1]))
	if v == "" {
		ts.Fatalf("envfile: %s is empty", args[1])
	}
	ts.Setenv(args[0], v)
}
