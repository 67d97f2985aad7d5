package magetargets

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/iii-go/iii/internal/demo"
	"github.com/iii-go/iii/internal/hostsetup"
	"github.com/iii-go/iii/internal/release"
	"github.com/magefile/mage/mg"
)

// Demo is the main job: it runs fixtures/demo under `iii compose --up` with freshly built
// binaries and prints what a microVM printed. First it installs what the host lacks (Debian's
// qemu and friends, as root; otherwise it says the command to run), builds the VM firmware and
// the preset images when missing, builds bin/, and publishes bin/sandbox-libkrun with its
// firmware into a local worker registry; last it stops Compose with Ctrl-C and checks that
// nothing of the demo is left running. All but the image cache lives in a temporary directory.
func Demo(ctx context.Context) error {
	start := time.Now()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if err := setupHost(ctx, hostsetup.VM); err != nil {
		return err
	}
	fmt.Println("==> building bin/iii, bin/sandbox-libkrun and bin/" + demo.WorkerBinary)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	mg.CtxDeps(bctx, Build)
	if err := demo.BuildWorker(bctx, root); err != nil {
		return err
	}
	fw, err := firmwareDir()
	if err != nil {
		return err
	}
	accel, why := hostsetup.Accelerator()
	fmt.Printf("==> accelerator %s: %s\n", accel, why)
	adapter, _ := release.ProductNamed("sandbox-libkrun")
	config, err := release.ReadDefaultConfig(root, adapter)
	if err != nil {
		return err
	}
	err = demo.Run(ctx, demo.Options{Root: root, Out: os.Stdout, AdapterConfig: config, Firmware: fw, Accelerator: accel})
	if err != nil {
		return fmt.Errorf("demo failed after %v: %w", time.Since(start).Round(time.Second), err)
	}
	fmt.Printf("demo: ok in %v\n", time.Since(start).Round(time.Second))
	return nil
}
