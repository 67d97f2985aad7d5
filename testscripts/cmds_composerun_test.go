package testscripts

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/release"
)

func init() {
	registerBinary(binary{name: "fakevmadapter", pkg: "./testscripts/internal/fakevmadapter", version: "0.0.0-test"})
	registerBinary(binary{name: "fakevmadapter-0.2", pkg: "./testscripts/internal/fakevmadapter", version: "0.0.0-test", tags: "contract02"})
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
// default configuration) and point III_REGISTRY_URL at that registry. The real sandbox-libkrun
// is published as a release ships it: its archive carries the VM firmware beside the binary.
func cmdPublish(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	cfgFile := fs.String("config", "", "")
	tag := fs.String("tag", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 3 {
		ts.Fatalf("usage: publish [-config FILE] [-tag T] NAME VERSION PROGRAM")
	}
	name, version, prog := fs.Arg(0), fs.Arg(1), fs.Arg(2)
	artifact := filepath.Join(ts.Getenv("BIN"), prog)
	if prog == "sandbox-libkrun" {
		artifact = packageAdapter(ts, version)
	}
	p := registry.Package{Name: name, Version: version, Type: registry.TypeBinary,
		Artifacts: map[string]string{platform.Host(os.Getenv).Triple: artifact}}
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

// adapterArchives guards the adapter archives packaged once per version and test run.
var adapterArchives sync.Mutex

// packageAdapter archives $BIN/sandbox-libkrun with the firmware it carries (when there is one)
// as the release does, once per version and test run (beside the binaries), and returns the
// archive's path.
func packageAdapter(ts *testscript.TestScript, version string) string {
	adapterArchives.Lock()
	defer adapterArchives.Unlock()
	t, ok := release.FindTarget(platform.Host(os.Getenv).Triple)
	if !ok {
		ts.Fatalf("publish: no release target %s", platform.Host(os.Getenv).Triple)
	}
	var fw []release.File
	if _, err := os.Stat(adapterFirmware()); err == nil {
		var err error
		fw, err = release.FirmwareFiles(adapterFirmware())
		ts.Check(err)
	}
	dir := filepath.Join(binDir, ".publish", version)
	if path := filepath.Join(dir, t.AssetName("sandbox-libkrun")); fileExists(path) {
		return path
	}
	ts.Check(os.MkdirAll(dir, 0o755))
	a, err := release.PackageBinary(dir, "sandbox-libkrun", version, t, filepath.Join(ts.Getenv("BIN"), "sandbox-libkrun"), fw...)
	ts.Check(err)
	return filepath.Join(dir, a.Name)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
