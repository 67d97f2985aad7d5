package testscripts

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/engine/platform"
)

func init() {
	registerBinary(binary{name: "fakevmadapter", pkg: "./testscripts/internal/fakevmadapter", version: "0.0.0-test"})
	registerCmd("envfile", cmdEnvFile)
	registerCmd("publish", cmdPublish)
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

// publish [-config FILE] [-tag T] NAME VERSION PROGRAM: publish $BIN/PROGRAM as the binary
// package NAME@VERSION for the host target into the registry $WORK/registry (FILE, JSON, is its
// default configuration) and point III_REGISTRY_URL at that registry.
func cmdPublish(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	cfgFile := fs.String("config", "", "")
	tag := fs.String("tag", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 3 {
		ts.Fatalf("usage: publish [-config FILE] [-tag T] NAME VERSION PROGRAM")
	}
	name, version, prog := fs.Arg(0), fs.Arg(1), fs.Arg(2)
	p := registry.Package{Name: name, Version: version, Type: registry.TypeBinary,
		Artifacts: map[string]string{platform.Host().Triple: filepath.Join(ts.Getenv("BIN"), prog)}}
	if *cfgFile != "" {
		if err := json.Unmarshal([]byte(ts.ReadFile(*cfgFile)), &p.Config); err != nil {
			ts.Fatalf("publish: %s: %v", *cfgFile, err)
		}
	}
	if *tag != "" {
		p.Tags = []string{*tag}
	}
	root := ts.MkAbs("registry")
	ts.Check(registry.Publish(root, p))
	ts.Setenv("III_REGISTRY_URL", "file://"+root)
}
