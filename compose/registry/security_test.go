package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/compose/errcode"
)

const triple = "x86_64-unknown-linux-gnu"

type entry struct {
	name string
	data []byte
}

func tarGz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o755, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// hostile writes workers/<name>/index.json with one artifact for triple: archive (when not nil)
// stored beside it, and url, sha and size as given ("" / 0 take the archive's own).
func hostile(t *testing.T, root, name string, archive []byte, url, sha string, size int64) {
	t.Helper()
	dir := filepath.Join(root, "workers", name)
	if err := os.MkdirAll(filepath.Join(dir, "1.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if archive != nil {
		if err := os.WriteFile(filepath.Join(dir, "1.0.0", name+".tar.gz"), archive, 0o644); err != nil {
			t.Fatal(err)
		}
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
	ix := Index{Name: name, Versions: []Version{{Version: "1.0.0", Type: TypeBinary, Targets: []string{triple},
		Artifacts: map[string]Artifact{triple: {URL: url, SHA256: sha, Size: size}}}}}
	b, _ := json.Marshal(ix)
	if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func install(t *testing.T, k *Cache, c *Client, name string) error {
	t.Helper()
	v, _, err := c.Resolve(context.Background(), name, "1.0.0")
	if err != nil {
		return err
	}
	_, err = k.Install(context.Background(), c, name, v.Version, triple, v.Artifacts[triple])
	return err
}

// onlyInstalls fails when the cache holds anything but the named install directories: no
// temporary download or unpack entry may survive a refusal.
func onlyInstalls(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("cache holds %v, want %v", got, want)
	}
}

// TestArtifactURLOutsideRegistry: an index cannot send Compose to another scheme or host, to a
// device, or outside a file:// registry's directory; a lock URL is checked too.
func TestArtifactURLOutsideRegistry(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "x.tar.gz")
	good := tarGz(t, entry{"x", []byte("#!/bin/sh\n")})
	if err := os.WriteFile(outside, good, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(good)
	digest := hex.EncodeToString(sum[:])
	hostile(t, root, "devzero", nil, "file:///dev/zero", strings.Repeat("0", 64), 0)
	hostile(t, root, "elsewhere", nil, "file://"+outside, digest, 0)
	hostile(t, root, "dotdot", nil, "../../../"+filepath.Base(filepath.Dir(outside))+"/x.tar.gz", digest, 0)
	hostile(t, root, "otherhost", nil, "http://127.0.0.2:1/x.tar.gz", digest, 0)
	// A link inside the registry to a device is not a regular file.
	hostile(t, root, "devlink", nil, "", strings.Repeat("0", 64), 0)
	if err := os.Symlink("/dev/zero", filepath.Join(root, "workers", "devlink", "1.0.0", "devlink.tar.gz")); err != nil {
		t.Fatal(err)
	}

	fileReg, err := New("file://" + root)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(root)))
	defer srv.Close()
	httpReg, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	k := &Cache{Dir: t.TempDir()}
	for _, c := range []*Client{fileReg, httpReg} {
		for _, name := range []string{"devzero", "elsewhere", "otherhost"} {
			err := install(t, k, c, name)
			if e := errcode.As(err, ""); e.Code != errcode.ArtifactURLRefused || !strings.Contains(e.Message, "outside the registry") {
				t.Errorf("%s from %s: %v", name, c.URL(), err)
			}
		}
	}
	if err := install(t, k, fileReg, "dotdot"); errcode.CodeOf(err) != errcode.ArtifactURLRefused {
		t.Errorf("../ out of a file:// registry: %v", err)
	}
	if err := install(t, k, fileReg, "devlink"); errcode.CodeOf(err) != errcode.ArtifactURLRefused || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("link to /dev/zero: %v", err)
	}
	// A lock can carry any URL: Install checks it as well.
	_, err = k.Install(context.Background(), httpReg, "devzero", "1.0.0", triple, Artifact{URL: "file:///dev/zero", SHA256: digest})
	if errcode.CodeOf(err) != errcode.ArtifactURLRefused {
		t.Errorf("lock URL file:///dev/zero over http: %v", err)
	}
	onlyInstalls(t, k.Dir)
}

// TestDownloadStopsAtSize: the index's size bounds the download, and the global cap
// bounds a download whose index gives no size.
func TestDownloadStopsAtSize(t *testing.T) {
	root := t.TempDir()
	archive := tarGz(t, entry{"sizelie", []byte("#!/bin/sh\necho the archive is larger than its index says\n")})
	hostile(t, root, "sizelie", archive, "", "", 1)
	hostile(t, root, "nosize", archive, "", "", -1)
	noise := make([]byte, 64<<10)
	for i := range noise {
		noise[i] = byte(rand.N(256))
	}
	big := tarGz(t, entry{"big", noise})
	hostile(t, root, "big", big, "", "", 0)
	srv := httptest.NewServer(http.FileServer(http.Dir(root)))
	defer srv.Close()
	fileReg, _ := New(root)
	httpReg, _ := New(srv.URL)
	for _, c := range []*Client{fileReg, httpReg} {
		k := &Cache{Dir: t.TempDir(), limits: limits{download: 1 << 10}}
		if err := install(t, k, c, "sizelie"); errcode.CodeOf(err) != errcode.PackageSizeMismatch {
			t.Errorf("size 1 from %s: %v", c.URL(), err)
		}
		if err := install(t, k, c, "nosize"); errcode.CodeOf(err) != errcode.PackageSizeMismatch {
			t.Errorf("negative size from %s: %v", c.URL(), err)
		}
		// The index gives big's true size, above the cap: refused before any byte is read.
		if err := install(t, k, c, "big"); errcode.CodeOf(err) != errcode.PackageTooLarge {
			t.Errorf("over the cap from %s: %v", c.URL(), err)
		}
		// From a lock (no size), the cap stops the copy.
		v, _, _ := c.Resolve(context.Background(), "big", "1.0.0")
		a := v.Artifacts[triple]
		a.Size = 0
		if _, err := k.Install(context.Background(), c, "big", "1.0.0", triple, a); errcode.CodeOf(err) != errcode.PackageTooLarge {
			t.Errorf("over the cap without a size from %s: %v", c.URL(), err)
		}
		onlyInstalls(t, k.Dir)
	}
}

// TestStreamedDownloadStopsAtCap: a server that announces no length and never stops is cut off
// at the cap.
func TestStreamedDownloadStopsAtCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 32<<10)
		for i := 0; i < 1<<12; i++ {
			if _, err := w.Write(buf); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	c, _ := New(srv.URL)
	k := &Cache{Dir: t.TempDir(), limits: limits{download: 1 << 20}}
	_, err := k.Install(context.Background(), c, "stream", "1.0.0", triple, Artifact{URL: srv.URL + "/stream.tar.gz", SHA256: strings.Repeat("0", 64)})
	if errcode.CodeOf(err) != errcode.PackageTooLarge {
		t.Fatalf("endless download: %v", err)
	}
	onlyInstalls(t, k.Dir)
}

// TestUnpackCaps: an archive that unpacks past the byte or file cap is refused, and nothing is
// left (a 204 KB archive can hold 200 MiB of zeros).
func TestUnpackCaps(t *testing.T) {
	root := t.TempDir()
	hostile(t, root, "bomb", tarGz(t, entry{"bomb", []byte("#!/bin/sh\n")}, entry{"zeros.bin", make([]byte, 8<<20)}), "", "", 0)
	many := []entry{{"many", []byte("#!/bin/sh\n")}}
	for i := 0; i < 20; i++ {
		many = append(many, entry{fmt.Sprintf("f%d", i), []byte("x")})
	}
	hostile(t, root, "many", tarGz(t, many...), "", "", 0)
	c, _ := New(root)
	k := &Cache{Dir: t.TempDir(), limits: limits{unpacked: 1 << 20, files: 10}}
	if fi, _ := os.Stat(filepath.Join(root, "workers", "bomb", "1.0.0", "bomb.tar.gz")); fi.Size() > 64<<10 {
		t.Fatalf("the bomb is %d bytes, not a bomb", fi.Size())
	}
	if err := install(t, k, c, "bomb"); errcode.CodeOf(err) != errcode.PackageTooLarge || !strings.Contains(err.Error(), "unpacks to more than 1 MiB") {
		t.Errorf("bomb: %v", err)
	}
	if err := install(t, k, c, "many"); errcode.CodeOf(err) != errcode.PackageTooLarge || !strings.Contains(err.Error(), "more than 10 files") {
		t.Errorf("many files: %v", err)
	}
	onlyInstalls(t, k.Dir)
}

// TestSweepLeftovers: temporary entries of a process that is gone (or of an older iii that did
// not name its process) are removed by the next install; a live process's are kept.
func TestSweepLeftovers(t *testing.T) {
	root := publishFixture(t)
	c, _ := New(root)
	k := &Cache{Dir: t.TempDir()}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("no `true` to get a dead process id: %v", err)
	}
	deadPID := dead.Process.Pid
	live := os.Getppid()
	for _, name := range []string{
		".download-devzero-3719283",                           // an older iii's, without a process id
		fmt.Sprintf(".download-%d-tool-123", deadPID),         // a killed download
		fmt.Sprintf(".unpack-%d-tool-456", deadPID),           // a killed unpack (a directory)
		fmt.Sprintf("tool-0.1-x.old-.unpack-%d-t-1", deadPID), // a replaced install never removed
		fmt.Sprintf(".download-%d-tool-789", live),            // another live process's download
	} {
		p := filepath.Join(k.Dir, name)
		if strings.HasPrefix(name, ".unpack-") {
			if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, _, err := c.Resolve(context.Background(), "tool", "0.3.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Install(context.Background(), c, "tool", v.Version, triple, v.Artifacts[triple]); err != nil {
		t.Fatal(err)
	}
	onlyInstalls(t, k.Dir, fmt.Sprintf(".download-%d-tool-789", live), InstallKey("tool", "0.3.1", triple))
}

// TestCancelledDownloadLeavesNothing: a run cancelled mid-download (Ctrl-C) removes its
// temporary file even when the source is a local file.
func TestCancelledDownloadLeavesNothing(t *testing.T) {
	root := t.TempDir()
	hostile(t, root, "slow", tarGz(t, entry{"slow", bytes.Repeat([]byte("y"), 1<<20)}), "", "", 0)
	c, _ := New(root)
	k := &Cache{Dir: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v, _, err := c.Resolve(context.Background(), "slow", "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Install(ctx, c, "slow", "1.0.0", triple, v.Artifacts[triple]); errcode.CodeOf(err) != errcode.PackageDownloadFailed {
		t.Fatalf("cancelled download: %v", err)
	}
	onlyInstalls(t, k.Dir)
}

// TestShortAndEmptyArtifacts: an artifact that is empty, or shorter than its index says while its
// server announces no length, is reported as such and not by its digest, which is only known once
// everything was read.
func TestShortAndEmptyArtifacts(t *testing.T) {
	root := t.TempDir()
	hostile(t, root, "empty", []byte{}, "", strings.Repeat("0", 64), 0)
	hostile(t, root, "emptyok", []byte{}, "", "", 0)
	c, _ := New(root)
	k := &Cache{Dir: t.TempDir()}
	for _, name := range []string{"empty", "emptyok"} {
		if err := install(t, k, c, name); errcode.CodeOf(err) != errcode.PackageArtifactEmpty {
			t.Errorf("%s: %v; want %s", name, err, errcode.PackageArtifactEmpty)
		}
	}
	short := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // no Content-Length: the size is known only at the end
		w.Write([]byte("ten bytes."))
	}))
	defer short.Close()
	sc, _ := New(short.URL)
	_, err := k.Install(context.Background(), sc, "short", "1.0.0", triple, Artifact{URL: short.URL + "/short.tar.gz", SHA256: strings.Repeat("0", 64), Size: 100})
	if errcode.CodeOf(err) != errcode.PackageSizeMismatch || !strings.Contains(err.Error(), "is 10 bytes, but its index gives size 100") {
		t.Errorf("short artifact: %v; want %s", err, errcode.PackageSizeMismatch)
	}
	onlyInstalls(t, k.Dir)
}
