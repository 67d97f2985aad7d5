package testscripts

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/rogpeppe/go-internal/testscript"
)

// Image pulls: a real OCI distribution registry (go-containerregistry's) on 127.0.0.1 serving
// the python preset, with every request it answers logged, and a cache entry laid out as 0.25
// left it.
func init() {
	registerCmd("ociregistry", cmdOCIRegistry)
	registerCmd("cache025", cmdCache025)
}

// ociregistry VAR LOG: serve an OCI registry on 127.0.0.1 until the script ends, holding the
// python preset of the real ~/.iii/cache as iiidev/python:latest (one layer); set VAR to its
// host:port and append "METHOD PATH" of every request it answers afterwards to LOG.
func cmdOCIRegistry(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: ociregistry VAR LOG")
	}
	layerFile, err := pythonLayer()
	if err != nil {
		ts.Fatalf("ociregistry: %v", err)
	}
	logPath := ts.MkAbs(args[1])
	var (
		mu      sync.Mutex
		logging bool
	)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if logging {
			f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				fmt.Fprintf(f, "%s %s\n", r.Method, r.URL.Path)
				f.Close()
			}
		}
		mu.Unlock()
		reg.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	ts.Defer(func() { srv.Close() })
	host := ln.Addr().String()

	layer, err := tarball.LayerFromFile(layerFile)
	ts.Check(err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	ts.Check(err)
	tag, err := name.NewTag(host + "/iiidev/python:latest")
	ts.Check(err)
	ts.Check(remote.Write(tag, img))
	ts.Check(os.WriteFile(logPath, nil, 0o644))
	mu.Lock()
	logging = true
	mu.Unlock()
	ts.Setenv(args[0], host)
}

// pythonLayer packs the python preset's root filesystem into a gzipped layer tar once per test
// run (beside the binaries) and returns its path.
var pythonLayer = sync.OnceValues(func() (string, error) {
	root, ok := presetImages(hostArch())["python"]
	if !ok {
		return "", fmt.Errorf("the python preset is not in ~/.iii/cache (go tool mage images)")
	}
	out := filepath.Join(binDir, "python-layer.tar.gz")
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	if err := tarTree(root, gz); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return out, f.Close()
})

// tarTree writes the tree under root as a tar stream (paths relative to root).
func tarTree(root string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// cache025 REF: lay out REF in $HOME/.iii/cache as 0.25 left an image it had pulled: the root
// filesystem (the python preset's, linked) at the directory 0.25 named for REF, nothing beside.
func cmdCache025(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: cache025 REF")
	}
	root, ok := presetImages(hostArch())["python"]
	if !ok {
		ts.Fatalf("cache025: the python preset is not in ~/.iii/cache")
	}
	out, err := exec.Command(filepath.Join(binDir, "iii-vmbuild"), "slug", args[0]).Output()
	if err != nil {
		ts.Fatalf("cache025: iii-vmbuild slug %s: %v", args[0], err)
	}
	cache := filepath.Join(ts.Getenv("HOME"), ".iii", "cache")
	ts.Check(os.MkdirAll(cache, 0o755))
	ts.Check(os.Symlink(root, filepath.Join(cache, strings.TrimSpace(string(out)))))
}
