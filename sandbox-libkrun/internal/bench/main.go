// Command bench measures the sandbox adapter's costs on this host: the floor is a bare qemu boot
// of the firmware's kernel and initramfs running nothing but `true`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/image/debimage"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

func main() {
	n := flag.Int("n", 10, "runs per measurement")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := qemu.New(qemu.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	floor, err := measureFloor(ctx, d, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: floor:", err)
		os.Exit(1)
	}
	fmt.Printf("%-44s %s\n", "VM floor ("+d.Name()+", true):", floor)

	cache := image.NewCache("")
	for _, p := range debimage.Presets[:1] {
		root, ok := cache.RootFS(p.Ref)
		if !ok {
			fmt.Printf("driver (%s): skipped, image not cached (go tool mage images)\n", p.Name)
			continue
		}
		ds, err := measureDriver(ctx, d, root, *n)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: driver:", err)
			os.Exit(1)
		}
		fmt.Printf("%-44s %s\n", "driver boot ("+p.Name+" image):", ds.Boot)
		fmt.Printf("%-44s %s\n", "driver exec true (booted):", ds.Exec)
		fmt.Printf("%-44s %s\n", "driver stop:", ds.Stop)
		fmt.Printf("%-44s %s  (%.2fx floor)\n", "driver boot+exec+stop:", ds.Cycle, float64(ds.Cycle.Median)/float64(floor.Median))
	}
}
