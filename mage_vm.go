//go:build mage

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
)

// Firmware builds the VM firmware from Debian's linux-image-cloud-amd64 package (uncompressed
// kernel, virtio/virtiofs/overlay modules, guest agent initramfs) into ~/.iii/lib/ and the
// release asset dist/sandbox-firmware-x86_64-unknown-linux-gnu.tar.gz.
func Firmware(ctx context.Context) error {
	dist := os.Getenv("III_DIST_DIR")
	if dist == "" {
		dist = "dist"
	}
	asset, err := filepath.Abs(filepath.Join(dist, "sandbox-firmware-x86_64-unknown-linux-gnu.tar.gz"))
	if err != nil {
		return err
	}
	return vmBuild(ctx, "firmware", "-asset", asset)
}

// Images builds the preset sandbox images (python, node) offline from Debian packages and imports
// them into the image cache ~/.iii/cache/.
func Images(ctx context.Context) error {
	return vmBuild(ctx, "images")
}

// vmBuild runs sandbox-libkrun's iii-vmbuild command with args.
func vmBuild(ctx context.Context, args ...string) error {
	c := exec.CommandContext(ctx, "go", append([]string{"run", "./cmd/iii-vmbuild"}, args...)...)
	c.Dir = "sandbox-libkrun"
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	return c.Run()
}
