// Command iii-vmbuild builds the VM firmware and the preset images; mage's Firmware and Images
// targets run it.
//
//	iii-vmbuild firmware -out DIR [-arch ARCH] [-work DIR] [-module DIR]
//	iii-vmbuild images [-arch ARCH] [-work DIR] [-cache DIR] [-force] [NAME...]
//	iii-vmbuild presets [-arch ARCH] [-cache DIR]
//	iii-vmbuild slug REF
//
// -arch is the guest architecture (x86_64 or aarch64; default the host's). images skips a
// preset already in the cache unless -force; presets prints "NAME PATH" for each preset the
// cache holds (where it is), for the demo and the test suite; slug prints the cache directory
// name of an image reference. The cache of a guest architecture other than the host's is the
// subdirectory <arch> of the cache directory (image.DirFor).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
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
	case "presets":
		err = listPresets(os.Args[2:])
	case "slug":
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: iii-vmbuild slug REF")
			break
		}
		var slug string
		if slug, err = image.Slug(os.Args[2]); err == nil {
			fmt.Println(slug)
		}
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
	arch := fs.String("arch", guestarch.Host().Name, "guest architecture: "+strings.Join(guestarch.Names(), ", "))
	_ = fs.Parse(args)
	a, err := guestarch.Parse(*arch)
	if err != nil {
		return err
	}
	_, err = firmware.Build(ctx, firmware.Options{WorkDir: *work, OutDir: *out, Arch: a, ModuleDir: *mod, Log: os.Stdout, Env: os.Environ()})
	return err
}

// archCache returns the guest architecture named by arch and its image cache under dir ("":
// the default cache directory).
func archCache(arch, dir string) (guestarch.Arch, *image.Cache, error) {
	a, err := guestarch.Parse(arch)
	if err != nil {
		return a, nil, err
	}
	if dir == "" {
		dir = image.DefaultDir(os.Getenv)
	}
	return a, image.NewCacheFor(image.DirFor(dir, a), a), nil
}

func buildImages(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images", flag.ExitOnError)
	work := fs.String("work", filepath.Join(os.TempDir(), "iii-image-build"), "scratch directory")
	cacheDir := fs.String("cache", image.DefaultDir(os.Getenv), "image cache directory")
	force := fs.Bool("force", false, "rebuild presets already in the cache")
	arch := fs.String("arch", guestarch.Host().Name, "guest architecture: "+strings.Join(guestarch.Names(), ", "))
	_ = fs.Parse(args)
	want := map[string]bool{}
	for _, n := range fs.Args() {
		want[n] = true
	}
	a, cache, err := archCache(*arch, *cacheDir)
	if err != nil {
		return err
	}
	for _, p := range debimage.Presets {
		if len(want) > 0 && !want[p.Name] {
			continue
		}
		if root, ok := cache.RootFS(p.Ref); ok && !*force {
			fmt.Printf("image %s: present in %s\n", p.Name, root)
			continue
		}
		dir, err := debimage.Build(ctx, p, a, *work, os.Stdout)
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

func listPresets(args []string) error {
	fs := flag.NewFlagSet("presets", flag.ExitOnError)
	cacheDir := fs.String("cache", image.DefaultDir(os.Getenv), "image cache directory")
	arch := fs.String("arch", guestarch.Host().Name, "guest architecture: "+strings.Join(guestarch.Names(), ", "))
	_ = fs.Parse(args)
	_, cache, err := archCache(*arch, *cacheDir)
	if err != nil {
		return err
	}
	for _, p := range debimage.Presets {
		if root, ok := cache.RootFS(p.Ref); ok {
			fmt.Printf("%s %s\n", p.Name, root)
		}
	}
	return nil
}
