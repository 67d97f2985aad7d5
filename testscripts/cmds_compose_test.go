package testscripts

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/release"
)

func init() {
	registerCmd("registry", cmdRegistry)
}

// adapterTargets are the targets sandbox-libkrun ships for (req H1), from the release table.
var adapterTargets = release.TriplesOf("sandbox-libkrun")

// allTargets are the targets iii itself ships for, from the release table.
var allTargets = release.TriplesOf("iii")

// adapterDefaults reads the default configuration the release publishes for sandbox-libkrun.
func adapterDefaults() (map[string]any, error) {
	p, _ := release.ProductNamed("sandbox-libkrun")
	return release.ReadDefaultConfig(repoRoot, p)
}

// adapterArchive packs $BIN/sandbox-libkrun once per test run.
var adapterArchive = sync.OnceValues(func() (string, error) {
	data, err := os.ReadFile(filepath.Join(binDir, "sandbox-libkrun"))
	if err != nil {
		return "", err
	}
	tgz, err := registry.TarGz(map[string][]byte{"sandbox-libkrun": data})
	if err != nil {
		return "", err
	}
	p := filepath.Join(binDir, "sandbox-libkrun-registry.tar.gz")
	return p, os.WriteFile(p, tgz, 0o644)
})

// registry [-http] DIR: publish the test registry into DIR and point III_REGISTRY_URL at it
// (file://DIR, or an http:// server for the script's lifetime with -http). It holds
// sandbox-libkrun 0.2.2, 0.3.0 and 0.3.1 (the freshly built $BIN/sandbox-libkrun, for its three
// targets and the host), hello 1.0.0 and 1.1.0 (a shell-script binary worker for every iii
// target), vmbundle 0.1.0 (a bundle whose iii.worker.yaml sets runtime.base_image) and
// iii-sandbox 0.26.0 (type engine, no artifact). It sets TRIPLE to the host target, the suffix of
// every installed package's directory.
func cmdRegistry(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	useHTTP := fs.Bool("http", false, "serve over http")
	if neg || fs.Parse(args) != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: registry [-http] DIR")
	}
	root := ts.MkAbs(fs.Arg(0))
	adapter, err := adapterArchive()
	ts.Check(err)
	targets := map[string]string{platform.Host(os.Getenv).Triple: adapter}
	for _, t := range adapterTargets {
		targets[t] = adapter
	}
	config, err := adapterDefaults()
	ts.Check(err)
	for _, v := range []string{"0.2.2", "0.3.0", "0.3.1"} {
		ts.Check(registry.Publish(root, registry.Package{Name: "sandbox-libkrun", Version: v, Type: registry.TypeBinary,
			Artifacts: targets, Targets: adapterTargets, Config: config}))
	}
	hello := filepath.Join(ts.MkAbs(""), ".hello-worker")
	ts.Check(writeProgram(hello, []byte("#!/bin/sh\necho hello from $III_WORKER_NAME\n"), 0o755))
	helloTargets := map[string]string{}
	for _, t := range allTargets {
		helloTargets[t] = hello
	}
	for _, v := range []string{"1.0.0", "1.1.0"} {
		ts.Check(registry.Publish(root, registry.Package{Name: "hello", Version: v, Type: registry.TypeBinary,
			Artifacts: helloTargets, Config: map[string]any{"greeting": "hello"}}))
	}
	bundle, err := registry.TarGz(map[string][]byte{
		"iii.worker.yaml": []byte("name: vmbundle\nruntime:\n  base_image: docker.io/library/python:3.12-slim\nscripts:\n  start: python3 main.py\n"),
		"main.py":         []byte("print('hello from a VM')\n"),
	})
	ts.Check(err)
	bundleFile := filepath.Join(ts.MkAbs(""), ".vmbundle.tar.gz")
	ts.Check(os.WriteFile(bundleFile, bundle, 0o644))
	ts.Check(registry.Publish(root, registry.Package{Name: "vmbundle", Version: "0.1.0", Type: registry.TypeBundle,
		Artifacts: map[string]string{registry.BundleKey: bundleFile}}))
	ts.Check(registry.Publish(root, registry.Package{Name: "iii-sandbox", Version: "0.26.0", Type: registry.TypeEngine}))
	ts.Setenv("TRIPLE", platform.Host(os.Getenv).Triple)
	if !*useHTTP {
		ts.Setenv("III_REGISTRY_URL", "file://"+root)
		return
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(root)))
	ts.Defer(srv.Close)
	ts.Setenv("III_REGISTRY_URL", srv.URL)
}
