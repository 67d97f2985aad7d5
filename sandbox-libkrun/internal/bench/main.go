// Command bench measures the sandbox adapter's costs on this host: the floor is a bare qemu boot
// of the firmware's kernel and initramfs running nothing but `true`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

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
	fmt.Printf("%-40s %s\n", "VM floor ("+d.Name()+", true):", floor)
}
