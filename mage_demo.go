//go:build mage

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/iii-go/iii/internal/demo"
	"github.com/magefile/mage/mg"
)

// Demo is the main job: it runs fixtures/demo under `iii compose --up` with freshly built
// binaries and prints what a microVM printed. First it builds bin/, then the VM firmware and the
// preset images when missing (the firmware also when its guest agent is stale), and publishes
// bin/sandbox-libkrun into a local worker registry; last it stops Compose with Ctrl-C and checks
// that nothing of the demo is left running. All but the firmware and image cache lives in a
// temporary directory.
func Demo(ctx context.Context) error {
	start := time.Now()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	fmt.Println("==> building bin/iii, bin/sandbox-libkrun and bin/" + demo.WorkerBinary)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	mg.CtxDeps(bctx, Build)
	if err := demo.BuildWorker(bctx, root); err != nil {
		return err
	}
	if err := demo.CheckHost(); err != nil {
		return err
	}
	if why := demo.FirmwareMissing(root); why != "" {
		fmt.Printf("==> VM firmware: %s; building it (go tool mage firmware)\n", why)
		fctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
		defer cancel()
		if err := Firmware(fctx); err != nil {
			return fmt.Errorf("building the VM firmware: %w", err)
		}
	} else {
		fmt.Printf("==> VM firmware present in %s\n", demo.FirmwareDir())
	}
	if why := demo.ImagesMissing(); why != "" {
		fmt.Printf("==> preset images: %s; building them (go tool mage images)\n", why)
		ictx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		defer cancel()
		if err := Images(ictx); err != nil {
			return fmt.Errorf("building the preset images: %w", err)
		}
	} else {
		fmt.Printf("==> preset images present in %s\n", demo.ImageCacheDir())
	}
	err = demo.Run(ctx, demo.Options{Root: root, Out: os.Stdout, AdapterConfig: adapterDefaults})
	if err != nil {
		return fmt.Errorf("demo failed after %v: %w", time.Since(start).Round(time.Second), err)
	}
	fmt.Printf("demo: ok in %v\n", time.Since(start).Round(time.Second))
	return nil
}
