//go:build mage

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/iii-go/iii/engine/platform"
	"github.com/iii-go/iii/internal/hostsetup"
	"github.com/magefile/mage/mg"
)

// Firmware builds the VM firmware of this host's target from Debian's linux-image-cloud package
// (uncompressed kernel, virtio/virtiofs/overlay modules, guest agent initramfs) into
// dist/firmware/<target>/: the adapter archive of that target carries it, and bin/firmware
// points at it. Debian's .deb files are cached in the system temporary directory.
func Firmware(ctx context.Context) error {
	dir, err := firmwareDir()
	if err != nil {
		return err
	}
	return vmBuild(ctx, "firmware", "-out", dir)
}

// Images builds the preset sandbox images (python, node) offline from Debian packages and imports
// them into the image cache ~/.iii/cache/; presets already there are kept.
func Images(ctx context.Context) error {
	return vmBuild(ctx, "images")
}

// Setup prepares a Debian 12 host for the demo and the test suite: it installs the Debian
// packages that are missing (as root; otherwise it stops with the command to run), builds the
// VM firmware and the preset images that are missing. `demo` and `test` run it first.
func Setup(ctx context.Context) error {
	return setup(ctx, append(append([]string(nil), hostsetup.VM...), hostsetup.Test...))
}

// setup installs pkgs, then builds the firmware and the images.
func setup(ctx context.Context, pkgs []string) error {
	if err := hostsetup.Ensure(pkgs, os.Stdout); err != nil {
		return err
	}
	fmt.Println("==> VM firmware (go tool mage firmware)")
	if err := Firmware(ctx); err != nil {
		return fmt.Errorf("building the VM firmware: %w", err)
	}
	fmt.Println("==> preset images (go tool mage images)")
	mg.CtxDeps(ctx, Images)
	return nil
}

// firmwareDir is dist/firmware/<host target> ($III_DIST_DIR honoured), as an absolute path.
func firmwareDir() (string, error) {
	_, dist, err := rootAndDist()
	if err != nil {
		return "", err
	}
	return filepath.Join(dist, "firmware", platform.Host().Triple), nil
}

// vmBuild runs sandbox-libkrun's iii-vmbuild command with args.
func vmBuild(ctx context.Context, args ...string) error {
	c := exec.CommandContext(ctx, "go", append([]string{"run", "./cmd/iii-vmbuild"}, args...)...)
	c.Dir = "sandbox-libkrun"
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	return c.Run()
}
