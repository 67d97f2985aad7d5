// Package debimage builds sandbox images offline from Debian packages: apt resolves and downloads
// the dependency closure (as if onto an empty system), dpkg-deb unpacks it into a root
// filesystem, busybox supplies /bin/sh and the small tools, and the result becomes a one-layer
// OCI image written to an OCI image layout.
package debimage

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/internal/dirlock"
)

// Preset is a built-in image: its catalog name, OCI reference and Debian packages.
type Preset struct {
	Name     string
	Ref      string
	Packages []string
	// Bytecode lists the Python library directories compiled to bytecode after the packages
	// are unpacked, in place of the maintainer scripts that would have done it on a real install.
	Bytecode []string
}

// Presets are the two images of the catalog.
var Presets = []Preset{
	// Debian generates bytecode at install time; without it every sandbox recompiles the
	// modules it imports.
	{Name: "python", Ref: "docker.io/iiidev/python:latest", Packages: []string{"python3"},
		Bytecode: []string{"/usr/lib/python3.11", "/usr/lib/python3/dist-packages"}},
	{Name: "node", Ref: "docker.io/iiidev/node:latest", Packages: []string{"nodejs"}},
}

// basePackages are added to every image.
var basePackages = []string{"busybox-static", "ca-certificates"}

const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Build makes the image of p for guest architecture a in workDir (downloads, root filesystem,
// OCI layout) and returns the layout directory, a new directory under workDir that the caller
// removes when done. Packages of another architecture than the host's come from apt's lists of
// that architecture (`dpkg --add-architecture`); nothing of them runs on the host.
func Build(ctx context.Context, p Preset, a guestarch.Arch, workDir string, log io.Writer) (string, error) {
	debs, err := download(ctx, filepath.Join(workDir, "debs-"+a.Debian), a.Debian, append(append([]string(nil), basePackages...), p.Packages...))
	if err != nil {
		return "", err
	}
	// Concurrent builds may share workDir (the download cache); each assembles on its own.
	rootfs, err := os.MkdirTemp(workDir, p.Name+"-rootfs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(rootfs)
	if err := os.Chmod(rootfs, 0o755); err != nil {
		return "", err
	}
	for _, d := range debs {
		if err := run(ctx, "dpkg-deb", "-x", d, rootfs); err != nil {
			return "", err
		}
	}
	if err := finishRoot(ctx, rootfs, a); err != nil {
		return "", err
	}
	if len(p.Bytecode) > 0 {
		if err := compileBytecode(ctx, rootfs, a, p.Bytecode, log); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(log, "image %s (%s): %d packages unpacked\n", p.Name, a.Name, len(debs))
	img, err := imageOf(rootfs, a)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(workDir, p.Name+"-oci-")
	if err != nil {
		return "", err
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{image.RefAnnotation: p.Ref})); err != nil {
		return "", err
	}
	return dir, nil
}

// compileBytecode writes unchecked-hash .pyc files (valid whatever the files' timestamps) for
// dirs of the image. A native image compiles with its own python3 (in a chroot). Bytecode does
// not depend on the machine, so for another architecture the host's python3 compiles the image's
// sources when it is the same version (the path prefix stripped, so the files name the guest's
// paths); otherwise the image goes without and says so.
func compileBytecode(ctx context.Context, root string, a guestarch.Arch, dirs []string, log io.Writer) error {
	args := []string{"-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash"}
	if a.Native() {
		return run(ctx, sbin("chroot"), append(append([]string{root, "/usr/bin/python3"}, args...), dirs...)...)
	}
	host := "/usr/bin/python3"
	hostVer, err := exec.CommandContext(ctx, host, "-c", "import sys; print('python%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		fmt.Fprintf(log, "image: no bytecode for %s (no host %s to compile it: %v); interpreters compile at each start\n", a.Name, host, err)
		return nil
	}
	ver := strings.TrimSpace(string(hostVer))
	if _, err := os.Stat(filepath.Join(root, "usr", "lib", ver)); err != nil {
		fmt.Fprintf(log, "image: no bytecode for %s (the host's %s is %s, the image has another); interpreters compile at each start\n", a.Name, host, ver)
		return nil
	}
	args = append(args, "-s", root, "-p", "/")
	for _, d := range dirs {
		args = append(args, filepath.Join(root, d))
	}
	return run(ctx, host, args...)
}

// download fetches the closure of pkgs for Debian architecture debArch into dir and returns the
// .deb paths.
func download(ctx context.Context, dir, debArch string, pkgs []string) ([]string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "partial"), 0o755); err != nil {
		return nil, err
	}
	// One apt at a time per download directory (apt itself is told not to lock).
	unlock, err := dirlock.Lock(dir, ".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	status := filepath.Join(dir, "empty-status")
	if err := os.WriteFile(status, nil, 0o644); err != nil {
		return nil, err
	}
	args := []string{"install", "-y", "-q", "--download-only", "--no-install-recommends",
		"-o", "Dir::State::status=" + status, "-o", "Dir::Cache::archives=" + dir, "-o", "Debug::NoLocking=1",
		"-o", "APT::Sandbox::User=root", "-o", "APT::Architecture=" + debArch}
	if err := run(ctx, "apt-get", append(args, pkgs...)...); err != nil {
		return nil, fmt.Errorf("%w (run apt-get update first if the package lists are missing)", err)
	}
	// The archive directory may hold packages of other images: unpack only this closure.
	out, err := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-s", "--no-install-recommends",
		"-o", "Dir::State::status=" + status, "-o", "Debug::NoLocking=1", "-o", "APT::Architecture=" + debArch}, pkgs...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("apt-get install -s: %w", err)
	}
	var debs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "Inst" {
			continue
		}
		ver := strings.Trim(f[2], "()")
		matches, _ := filepath.Glob(filepath.Join(dir, f[1]+"_*.deb"))
		found := ""
		for _, m := range matches {
			base := strings.ReplaceAll(filepath.Base(m), "%3a", ":")
			if strings.Contains(base, "_"+ver+"_") && (strings.HasSuffix(base, "_"+debArch+".deb") || strings.HasSuffix(base, "_all.deb")) {
				found = m
			}
		}
		if found == "" {
			return nil, fmt.Errorf("package %s %s was not downloaded", f[1], ver)
		}
		debs = append(debs, found)
	}
	if len(debs) == 0 {
		return nil, fmt.Errorf("apt resolved no packages for %v", pkgs)
	}
	return debs, nil
}

// finishRoot adds what maintainer scripts and an installer would: busybox applets for the tools
// no package supplied, the usual directories, and a root user. The applet list comes from the
// image's busybox, or for another architecture from the host's busybox-static (the same Debian
// package, so the same applets).
func finishRoot(ctx context.Context, root string, a guestarch.Arch) error {
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "proc", "sys", "dev", "run", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	// World-writable and sticky: Go spells the sticky bit os.ModeSticky (0o1777 would drop it).
	if err := os.MkdirAll(filepath.Join(root, "tmp"), os.ModePerm|os.ModeSticky); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), os.ModePerm|os.ModeSticky); err != nil {
		return err
	}
	bb := filepath.Join(root, "bin", "busybox")
	if !a.Native() {
		bb = "busybox"
	}
	out, err := exec.CommandContext(ctx, bb, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("busybox --list-full: %w", err)
	}
	for _, app := range strings.Fields(string(out)) {
		base := filepath.Base(app)
		if exists(filepath.Join(root, "bin", base)) || exists(filepath.Join(root, "usr/bin", base)) ||
			exists(filepath.Join(root, "sbin", base)) || exists(filepath.Join(root, "usr/sbin", base)) {
			continue
		}
		if err := os.Symlink("/bin/busybox", filepath.Join(root, app)); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":       "root:x:0:\nnogroup:x:65534:\n",
		"etc/hostname":    "sandbox\n",
		"etc/hosts":       "127.0.0.1 localhost sandbox\n::1 localhost\n",
		"etc/resolv.conf": "nameserver 10.0.2.3\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// imageOf makes a one-layer linux/<arch> image of the directory root.
func imageOf(root string, a guestarch.Arch) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarDir(root, pw)) }()
		return pr, nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", a.GOARCH
	cf.Config.Env = []string{pathEnv}
	cf.Config.Cmd = []string{"/bin/sh"}
	cf.Config.WorkingDir = "/"
	return mutate.ConfigFile(img, cf)
}

// tarDir writes the tree under root as a tar stream owned by root:root.
func tarDir(root string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, b)
	}
	return nil
}

// sbin finds a system administration command on PATH, else in /usr/sbin (a PATH without the
// sbin directories is common outside login shells).
func sbin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return filepath.Join("/usr/sbin", name)
}
