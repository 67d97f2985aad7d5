// Command iii-vmbuild builds the VM firmware and the preset images; mage's Firmware and Images
// targets run it.
//
//	iii-vmbuild firmware [-work DIR] [-out DIR] [-asset FILE]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
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
	out := fs.String("out", firmware.Dir(), "firmware directory")
	asset := fs.String("asset", "", "also write the release tarball here")
	mod := fs.String("module", ".", "the sandbox-libkrun module directory")
	_ = fs.Parse(args)
	_, err := firmware.Build(ctx, firmware.Options{WorkDir: *work, OutDir: *out, AssetPath: *asset, ModuleDir: *mod, Log: os.Stdout})
	return err
}
