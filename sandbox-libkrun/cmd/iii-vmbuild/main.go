// Command iii-vmbuild builds the VM firmware and the preset images; mage's Firmware and Images
// targets run it.
//
//	iii-vmbuild firmware -out DIR [-work DIR] [-module DIR]
//	iii-vmbuild images [-work DIR] [-cache DIR] [NAME...]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/image/debimage"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: iii-vmbuild firmware|images [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "firmware":
		err = buildFirmware(ctx, os.Args[2:])
	case "images":
		err = buildImages(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "iii-vmbuild:", err)
		os.Exit(1)
	}
}

func buildFirmware(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("firmware", flag.ExitOnError)
	work := fs.String("work", filepath.Join(os.TempDir(), "iii-firmware-build"), "scratch directory")
	out := fs.String("out", "", "firmware directory to write (required)")
	mod := fs.String("module", ".", "the sandbox-libkrun module directory")
	_ = fs.Parse(args)
	_, err := firmware.Build(ctx, firmware.Options{WorkDir: *work, OutDir: *out, ModuleDir: *mod, Log: os.Stdout})
	return err
}

func buildImages(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images", flag.ExitOnError)
	work := fs.String("work", filepath.Join(os.TempDir(), "iii-image-build"), "scratch directory")
	cacheDir := fs.String("cache", image.DefaultDir(), "image cache directory")
	_ = fs.Parse(args)
	want := map[string]bool{}
	for _, n := range fs.Args() {
		want[n] = true
	}
	cache := image.NewCache(*cacheDir)
	for _, p := range debimage.Presets {
		if len(want) > 0 && !want[p.Name] {
			continue
		}
		dir, err := debimage.Build(ctx, p, *work, os.Stdout)
		if err != nil {
			return fmt.Errorf("image %s: %w", p.Name, err)
		}
		rootfs, err := cache.ImportLayout(dir, p.Ref)
		os.RemoveAll(dir)
		if err != nil {
			return fmt.Errorf("image %s: %w", p.Name, err)
		}
		fmt.Printf("image %s: %s imported into %s\n", p.Name, p.Ref, rootfs)
	}
	return nil
}
