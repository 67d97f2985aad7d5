package magetargets

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/internal/hostsetup"
	"github.com/iii-go/iii/internal/release"
	"github.com/magefile/mage/mg"
)

// Firmware builds the VM firmware of every guest architecture the adapter ships for (x86_64
// from Debian's linux-image-cloud-amd64, aarch64 from linux-image-arm64: uncompressed kernel,
// virtio/virtiofs/9p/overlay modules, guest agent initramfs) into dist/firmware/<linux target>/:
// the adapter archive of each target carries its own (Apple Silicon aarch64's), bin/firmware
// points at this host's and bin/firmware-<arch> at the other's. Debian's .deb files are cached
// in the system temporary directory.
func Firmware(ctx context.Context) error {
	return buildFirmware(ctx, release.FirmwareTriples())
}

// buildFirmware builds the firmware of each Linux target triple into dist/firmware/<triple>/.
func buildFirmware(ctx context.Context, triples []string) error {
	_, dist, err := rootAndDist()
	if err != nil {
		return err
	}
	for _, triple := range triples {
		arch, _, _ := strings.Cut(triple, "-")
		if err := vmBuild(ctx, "firmware", "-arch", arch, "-out", filepath.Join(dist, "firmware", triple)); err != nil {
			return fmt.Errorf("firmware %s: %w", triple, err)
		}
	}
	return nil
}

// Images builds the preset sandbox images (python, node) offline from Debian packages and imports
// them into the image cache ~/.iii/cache/, then those of the other guest architecture (run under
// emulation) into ~/.iii/cache/<arch>/; presets already there are kept.
func Images(ctx context.Context) error {
	if err := vmBuild(ctx, "images"); err != nil {
		return err
	}
	for _, arch := range emulatedArches() {
		if err := vmBuild(ctx, "images", "-arch", arch); err != nil {
			return err
		}
	}
	return nil
}

// emulatedArches are the guest architectures the adapter ships for other than this host's.
func emulatedArches() []string {
	var out []string
	for _, triple := range release.FirmwareTriples() {
		if triple != platform.Host(os.Getenv).Triple {
			arch, _, _ := strings.Cut(triple, "-")
			out = append(out, arch)
		}
	}
	return out
}

// Setup prepares a Debian 12 host for the demo and the test suite: it installs the Debian
// packages that are missing (as root; otherwise it stops with the command to run), including
// the qemu and the dpkg architecture of the other guest architecture, and builds the VM
// firmware and the preset images (of both guest architectures) that are missing. `test` runs it
// first.
func Setup(ctx context.Context) error {
	emuPkgs, emuArch := hostsetup.Emulated()
	pkgs := slices.Concat(hostsetup.VM, hostsetup.Test, emuPkgs)
	if err := hostsetup.Ensure(pkgs, []string{emuArch}, os.Stdout); err != nil {
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

// setupHost is Setup for this host's guests only (the demo): pkgs, the firmware of this host's
// target and its preset images.
func setupHost(ctx context.Context, pkgs []string) error {
	if err := hostsetup.Ensure(pkgs, nil, os.Stdout); err != nil {
		return err
	}
	fmt.Println("==> VM firmware of " + platform.Host(os.Getenv).Triple)
	if err := buildFirmware(ctx, []string{platform.Host(os.Getenv).Triple}); err != nil {
		return fmt.Errorf("building the VM firmware: %w", err)
	}
	fmt.Println("==> preset images")
	return vmBuild(ctx, "images")
}

// firmwareDir is dist/firmware/<host target> ($III_DIST_DIR honoured), as an absolute path.
func firmwareDir() (string, error) {
	_, dist, err := rootAndDist()
	if err != nil {
		return "", err
	}
	return filepath.Join(dist, "firmware", platform.Host(os.Getenv).Triple), nil
}

// vmBuild runs sandbox-libkrun's iii-vmbuild command with args.
func vmBuild(ctx context.Context, args ...string) error {
	c := exec.CommandContext(ctx, "go", append([]string{"run", "./cmd/iii-vmbuild"}, args...)...)
	c.Dir = "sandbox-libkrun"
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	return c.Run()
}
