// Command bench measures the sandbox adapter's costs on this host: the floor is a bare qemu boot
// of the firmware's kernel and initramfs running nothing but `true`; sandbox::run is timed end to
// end through an in-process engine, its sandbox router and the adapter, cold and with a warm pool.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/iii-go/iii/engine/platform"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/image/debimage"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

func main() {
	n := flag.Int("n", 10, "runs per measurement")
	accel := flag.String("accel", defaultAccel(), "accelerator of the floor and of every sandbox: kvm, tcg or auto")
	fw := flag.String("firmware", defaultFirmware(), "VM firmware directory")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	p := firmware.At(*fw)
	d, err := qemu.New(qemu.Options{Accel: *accel, Kernel: p.Kernel, Initrd: p.Initrd})
	if err != nil {
		fmt.Println("bench (sandbox-libkrun): skipped:", err)
		return
	}
	fmt.Printf("accelerator %s (asked: %s); firmware %s; the floor and every sandbox::run below run under it\n", d.Accel(), *accel, *fw)
	floor, err := measureFloor(ctx, d, *n)
	if err != nil {
		fmt.Println("bench (sandbox-libkrun): skipped: the floor boot fails:", err)
		return
	}
	fmt.Printf("%-44s %s\n", "VM floor ("+d.Name()+", true):", floor)

	preset := debimage.Presets[0]
	root, ok := image.NewCache("").RootFS(preset.Ref)
	if !ok {
		fmt.Printf("driver and sandbox::run: skipped, image %s not cached (go tool mage images)\n", preset.Ref)
		return
	}
	ds, err := measureDriver(ctx, d, root, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: driver:", err)
		os.Exit(1)
	}
	fmt.Printf("%-44s %s\n", "driver boot ("+preset.Name+" image):", ds.Boot)
	fmt.Printf("%-44s %s\n", "driver exec true (booted):", ds.Exec)
	fmt.Printf("%-44s %s\n", "driver stop:", ds.Stop)
	fmt.Printf("%-44s %s  (%.2fx floor)\n", "driver boot+exec+stop:", ds.Cycle, float64(ds.Cycle.Median)/float64(floor.Median))

	fmt.Printf("sandbox::run end to end (client -> engine -> router -> adapter -> VM), image %s, default cpus/memory;\n", preset.Name)
	fmt.Printf("each run starts once the previous VM is gone (and the pool is full again); ratio = median / floor median;\n")
	fmt.Printf("target: run overhead over the floor at most 20%% (ratio <= 1.20)\n")
	for _, mode := range []struct {
		label string
		pool  int
	}{{"cold", 0}, {"warm", 1}} {
		stats, err := measureRuns(ctx, d, *n, mode.pool)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: sandbox::run:", err)
			os.Exit(1)
		}
		for i, c := range runCases {
			name := fmt.Sprintf("run %s, %s:", c.Label, mode.label)
			if mode.pool > 0 {
				name = fmt.Sprintf("run %s, warm_pool %d:", c.Label, mode.pool)
			}
			fmt.Printf("%s %s  %s\n", pad(name, 44), stats[i], verdict(stats[i], floor))
		}
	}
}

// defaultAccel is tcg where /dev/kvm is absent, auto elsewhere (as the demo and the suite pick).
func defaultAccel() string {
	if _, err := os.Stat(qemu.KVMDevice()); err != nil {
		return "tcg"
	}
	return "auto"
}

// defaultFirmware is the firmware mage builds for this host (dist/firmware/<target>, from the
// repository root where mage runs the bench), else the installed one.
func defaultFirmware() string {
	dir := filepath.Join("dist", "firmware", platform.Host().Triple)
	if _, err := os.Stat(filepath.Join(dir, firmware.ManifestFile)); err == nil {
		return dir
	}
	return firmware.Dir()
}
