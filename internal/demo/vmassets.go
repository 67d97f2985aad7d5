package demo

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// Firmware files the adapter boots, in the firmware directory.
var firmwareFiles = []string{"iii-vm-vmlinux", "iii-vm-initramfs.cpio", "iii-vm-firmware.json"}

// presetImages are the cache entries `go tool mage images` creates.
var presetImages = []string{"index.docker.io_iiidev_python_latest", "index.docker.io_iiidev_node_latest"}

// FirmwareDir is where the adapter looks for its firmware: $III_LIB_DIR, else ~/.iii/lib.
func FirmwareDir() string { return iiiDir("III_LIB_DIR", "lib") }

// ImageCacheDir is the adapter's image cache: $III_CACHE_DIR, else ~/.iii/cache.
func ImageCacheDir() string { return iiiDir("III_CACHE_DIR", "cache") }

func iiiDir(env, sub string) string {
	if d := os.Getenv(env); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".iii", sub)
}

// CheckHost fails, naming the fix, when the host lacks what the adapter's VMs need (the same
// defaults the adapter uses under Compose).
func CheckHost() error {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return fmt.Errorf("qemu-system-x86_64 is not installed; run `bash .ci/install-vm-deps` as root")
	}
	if _, err := os.Stat("/usr/lib/qemu/virtiofsd"); err != nil {
		return fmt.Errorf("virtiofsd is not installed (/usr/lib/qemu/virtiofsd); run `bash .ci/install-vm-deps` as root")
	}
	return nil
}

// FirmwareMissing says why the firmware must be built ("" when it is usable): a file is
// missing, or its initramfs does not carry the guest agent version of the checkout at root (the
// adapter refuses an agent that announces another one).
func FirmwareMissing(root string) string {
	dir := FirmwareDir()
	for _, f := range firmwareFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Sprintf("%s is missing", filepath.Join(dir, f))
		}
	}
	want, err := agentVersion(root)
	if err != nil {
		return ""
	}
	initrd, err := os.ReadFile(filepath.Join(dir, "iii-vm-initramfs.cpio"))
	if err != nil {
		return err.Error()
	}
	if !bytes.Contains(initrd, []byte(want)) {
		return fmt.Sprintf("its guest agent is not %s (built from an older checkout)", want)
	}
	return ""
}

// ImagesMissing says why the preset images must be built ("" when both are in the cache).
func ImagesMissing() string {
	for _, img := range presetImages {
		p := filepath.Join(ImageCacheDir(), img, "rootfs", "bin")
		if _, err := os.Stat(p); err != nil {
			return fmt.Sprintf("%s is missing", filepath.Dir(p))
		}
	}
	return ""
}

// agentVersion reads the AgentVersion constant of sandbox-libkrun/vm/proto (the root module does
// not depend on the adapter's module).
func agentVersion(root string) (string, error) {
	path := filepath.Join(root, "sandbox-libkrun", "vm", "proto", "messages.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if n.Name != "AgentVersion" || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					return strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return "", fmt.Errorf("%s: no AgentVersion constant", path)
}
