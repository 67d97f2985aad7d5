package testscripts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/release"
)

func init() {
	registerCmd("hostileregistry", cmdHostileRegistry)
	registerCmd("manykeys", cmdManyKeys)
	registerCmd("resign", cmdResign)
}

// hostileregistry [-http] DIR: publish the malicious registry of the security review's
// Appendix C into DIR, one binary package 1.0.0 for the host target per case, and point
// III_REGISTRY_URL at it (file://DIR, or an http:// server for the script's lifetime), and TRIPLE
// to the host target:
//
//	devzero    artifact URL file:///dev/zero (digest of 64 zeros)
//	otherhost  artifact URL on another host, http://127.0.0.2:9/otherhost.tar.gz
//	sizelie    a good archive whose index gives size 1
//	noexe      an archive whose noexe is a symlink to /etc/passwd, plus a readme
//	good       a shell-script worker, well formed
func cmdHostileRegistry(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("hostileregistry", flag.ContinueOnError)
	useHTTP := fs.Bool("http", false, "serve over http")
	if neg || fs.Parse(args) != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: hostileregistry [-http] DIR")
	}
	root := ts.MkAbs(fs.Arg(0))
	script := []byte("#!/bin/sh\necho hello\n")
	good, err := registry.TarGz(map[string][]byte{"good": script})
	ts.Check(err)
	sizelie, err := registry.TarGz(map[string][]byte{"sizelie": script})
	ts.Check(err)
	noexe := symlinkArchive(ts, "noexe", "/etc/passwd")
	publishRaw(ts, root, "devzero", nil, "file:///dev/zero", strings.Repeat("0", 64), 0)
	publishRaw(ts, root, "otherhost", good, "http://127.0.0.2:9/otherhost.tar.gz", "", 0)
	publishRaw(ts, root, "sizelie", sizelie, "", "", 1)
	publishRaw(ts, root, "noexe", noexe, "", "", 0)
	publishRaw(ts, root, "good", good, "", "", 0)
	ts.Setenv("TRIPLE", platform.Host(os.Getenv).Triple)
	if !*useHTTP {
		ts.Setenv("III_REGISTRY_URL", "file://"+root)
		return
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(root)))
	ts.Defer(srv.Close)
	ts.Setenv("III_REGISTRY_URL", srv.URL)
}

// symlinkArchive is a .tar.gz holding name as a symlink to target, and a regular readme.
func symlinkArchive(ts *testscript.TestScript, name, target string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	ts.Check(tw.WriteHeader(&tar.Header{Name: name, Linkname: target, Typeflag: tar.TypeSymlink, Mode: 0o777}))
	ts.Check(tw.WriteHeader(&tar.Header{Name: "readme", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2}))
	_, err := tw.Write([]byte("x\n"))
	ts.Check(err)
	ts.Check(tw.Close())
	ts.Check(gz.Close())
	return buf.Bytes()
}

// publishRaw writes workers/NAME/index.json by hand: archive (when not nil) beside it under
// 1.0.0/, and url, sha and size as given ("" or 0 take the archive's own).
func publishRaw(ts *testscript.TestScript, root, name string, archive []byte, url, sha string, size int64) {
	dir := filepath.Join(root, "workers", name)
	ts.Check(os.MkdirAll(filepath.Join(dir, "1.0.0"), 0o755))
	if archive != nil {
		ts.Check(os.WriteFile(filepath.Join(dir, "1.0.0", name+".tar.gz"), archive, 0o644))
		sum := sha256.Sum256(archive)
		if sha == "" {
			sha = hex.EncodeToString(sum[:])
		}
		if size == 0 {
			size = int64(len(archive))
		}
	}
	if url == "" {
		url = "1.0.0/" + name + ".tar.gz"
	}
	triple := platform.Host(os.Getenv).Triple
	ix := registry.Index{Name: name, Tags: map[string]string{"latest": "1.0.0"}, Versions: []registry.Version{{
		Version: "1.0.0", Type: registry.TypeBinary, Targets: []string{triple},
		Artifacts: map[string]registry.Artifact{triple: {URL: url, SHA256: sha, Size: size}}}}}
	b, err := json.MarshalIndent(ix, "", "  ")
	ts.Check(err)
	ts.Check(os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644))
}

// manykeys FILE N [PAD]: write a compose file with one path:// container whose config_override
// holds N keys (k0: 0 ... kN-1: N-1), followed by a comment of PAD bytes (default none).
func cmdManyKeys(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: manykeys FILE N [PAD]")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	pad := 0
	if len(args) == 3 {
		pad, err = strconv.Atoi(args[2])
		ts.Check(err)
	}
	var b bytes.Buffer
	b.WriteString("containers:\n  a:\n    worker: path://.\n    scripts: {run: 'true'}\n    config_override:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "      k%d: %d\n", i, i)
	}
	if pad > 0 {
		b.WriteString("# ")
		b.Write(bytes.Repeat([]byte("x"), pad))
		b.WriteString("\n")
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), b.Bytes(), 0o644))
}

// resign [-symlink TARGET] DIR VERSION [FILE]: replace the iii in DIR/iii/vVERSION/'s archive for
// the host target with FILE (or with a symlink to TARGET) and sign the result as the release
// would: the archive's .sha256 sidecar, checksums.txt and manifest.json all match it, so only
// what the archive holds is wrong.
func cmdResign(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("resign", flag.ContinueOnError)
	link := fs.String("symlink", "", "archive iii as a symlink to this target")
	if neg || fs.Parse(args) != nil || fs.NArg() != 2+btoi(*link == "") {
		ts.Fatalf("usage: resign [-symlink TARGET] DIR VERSION [FILE]")
	}
	dir := release.Dir(ts.MkAbs(fs.Arg(0)), fs.Arg(1))
	t, ok := release.FindTarget(platform.Host(os.Getenv).Triple)
	if !ok {
		ts.Fatalf("host target %s is not a release target", platform.Host(os.Getenv).Triple)
	}
	var a release.Asset
	var err error
	if *link == "" {
		a, err = release.PackageBinary(dir, "iii", fs.Arg(1), t, ts.MkAbs(fs.Arg(2)))
		ts.Check(err)
	} else {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		ts.Check(tw.WriteHeader(&tar.Header{Name: t.Exe("iii"), Linkname: *link, Typeflag: tar.TypeSymlink, Mode: 0o777}))
		ts.Check(tw.Close())
		ts.Check(gz.Close())
		name := t.AssetName("iii")
		ts.Check(os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644))
		sum := sha256.Sum256(buf.Bytes())
		a = release.Asset{Name: name, Product: "iii", Version: fs.Arg(1), Target: t.Triple, SHA256: hex.EncodeToString(sum[:]), Size: int64(buf.Len())}
		ts.Check(os.WriteFile(filepath.Join(dir, name+".sha256"), []byte(release.ChecksumLine(a.SHA256, name)), 0o644))
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	ts.Check(err)
	var m release.Manifest
	ts.Check(json.Unmarshal(raw, &m))
	for i := range m.Assets {
		if m.Assets[i].Name == a.Name {
			m.Assets[i] = a
		}
	}
	_, err = release.WriteIndex(dir, fs.Arg(1), m.Assets)
	ts.Check(err)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
