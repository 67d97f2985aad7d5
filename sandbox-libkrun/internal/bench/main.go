// Command bench measures the sandbox adapter's costs on this host: the floor is a bare qemu boot
// of the firmware's kernel and initramfs running nothing but `true`; sandbox::run is timed end to
// end through an in-process engine, its sandbox router and the adapter, cold and with a warm pool.
// The fs section times fs::write and fs::read of a 32 MiB file through stream channels; the
// process section streamed exec, a large stdout and re-attached background processes. The fork
// section (-fork alone) saves a running python sandbox and forks it into 8 copies, creates from
// such a snapshot, and pauses and resumes a sandbox, with the targets of each and the bounds of
// this machine (8 copies restored at once from the image snapshot: their time and memory).
// A last section does the same cold for the other guest architecture (aarch64 on an x86_64 host,
// under TCG emulation), over virtiofs and over 9p (the share of macOS).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/iii-go/iii/internal/base/platform"

	"github.com/iii-go/iii/sandbox-libkrun/firmware"
	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/image/debimage"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

func main() {
	o := parseFlags()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	p := firmware.At(o.fw)
	d, err := qemu.New(qemu.Options{Accel: o.accel, Kernel: p.Kernel, Initrd: p.Initrd, Qemu: os.Getenv("III_QEMU"), Virtiofsd: os.Getenv("III_VIRTIOFSD"), KVMDevice: os.Getenv("III_KVM_DEVICE")})
	if err != nil {
		fmt.Println("bench (sandbox-libkrun): skipped:", err)
		return
	}
	fmt.Printf("accelerator %s (asked: %s); firmware %s; the floor and every sandbox::run below run under it\n", d.AccelChoice(), o.accel, o.fw)
	if sectionAlone(ctx, d, o) {
		return
	}
	floor, ok := floorSection(ctx, d, o.n)
	if !ok {
		return
	}
	preset := debimage.Presets[0]
	root, ok := image.NewCache("").RootFS(preset.Ref)
	if !ok {
		fmt.Printf("driver and sandbox::run: skipped, image %s not cached (go tool mage images)\n", preset.Ref)
		return
	}
	if o.forkOnly {
		exitOn("bench: fork:", forkSection(ctx, d, root, o.n, floor))
		return
	}
	exitOn("bench: snapshots:", measureSnapshots(ctx, d, root, o.n, floor))
	if o.snapOnly {
		runSection(ctx, d, o.n, floor, debimage.Presets[0].Name, runModes[0:1:1])
		runSection(ctx, d, o.n, floor, debimage.Presets[0].Name, runModes[2:])
		return
	}
	driverSection(ctx, d, root, o.n, floor, preset.Name)
	runSection(ctx, d, o.n, floor, preset.Name, runModes)
	exitOn("bench: fork:", forkSection(ctx, d, root, o.n, floor))
	fsSection(ctx, d, o.n)
	processSection(ctx, d, o.n)
	exposeSection(ctx, d, o.n)
	if o.guestArch != "" {
		exitOn("bench: guest arch:", guestSection(ctx, o.guestArch, o.guestFW, o.accel, o.n))
	}
}

// options are the command's flags.
type options struct {
	n                                                int
	accel, fw, guestArch, guestFW                    string
	fsOnly, procOnly, snapOnly, exposeOnly, forkOnly bool
}

// parseFlags defines the command's flags and parses them.
func parseFlags() options {
	var o options
	flag.IntVar(&o.n, "n", 10, "runs per measurement")
	flag.StringVar(&o.accel, "accel", defaultAccel(), "accelerator of the floor and of every sandbox: kvm, tcg or auto")
	flag.StringVar(&o.fw, "firmware", defaultFirmware(), "VM firmware directory")
	other := otherArch()
	flag.StringVar(&o.guestArch, "guest-arch", other.Name, "architecture of the last section's guests (empty: no such section)")
	flag.StringVar(&o.guestFW, "guest-firmware", "", "VM firmware directory of -guest-arch (default dist/firmware/<its linux target>, else the installed one)")
	flag.BoolVar(&o.fsOnly, "fs", false, "run only the fs::read / fs::write section")
	flag.BoolVar(&o.procOnly, "processes", false, "run only the streamed exec and background process section")
	flag.BoolVar(&o.snapOnly, "snapshots", false, "run only the floor, the snapshot section and sandbox::run cold with snapshots off and from a snapshot")
	flag.BoolVar(&o.exposeOnly, "expose", false, "run only the exposed port section: an HTTP GET through sandbox::expose against the same server on the host")
	flag.BoolVar(&o.forkOnly, "fork", false, "run only the floor and the section of snapshots of running sandboxes (fork, create from one, pause and resume)")
	flag.Parse()
	return o
}

// sectionAlone runs the section that -fs, -processes or -expose asks for alone (none of them
// needs the floor) and says whether one was.
func sectionAlone(ctx context.Context, d *qemu.Driver, o options) bool {
	switch {
	case o.fsOnly:
		fsSection(ctx, d, o.n)
	case o.procOnly:
		processSection(ctx, d, o.n)
	case o.exposeOnly:
		exposeSection(ctx, d, o.n)
	default:
		return false
	}
	return true
}

// floorSection measures and prints the floor with its phases; false (said) when the floor boot
// fails, as then no sandbox boots either.
func floorSection(ctx context.Context, d *qemu.Driver, n int) (Stats, bool) {
	floor, floorPhases, err := measureFloor(ctx, d, n)
	if err != nil {
		fmt.Println("bench (sandbox-libkrun): skipped: the floor boot fails:", err)
		return Stats{}, false
	}
	fmt.Printf("%-44s %s\n", fmt.Sprintf("VM floor (%s, %d MiB, true):", d.Name(), sandboxMemoryMB), floor)
	floorPhases.Print(os.Stdout, "the floor")
	return floor, true
}

// driverSection times the driver alone on root, the image preset's rootfs: boot, first exec,
// stop and the three together against the floor, with the phases of the boot and first exec.
func driverSection(ctx context.Context, d *qemu.Driver, root string, n int, floor Stats, preset string) {
	ds, err := measureDriver(ctx, d, root, n)
	exitOn("bench: driver:", err)
	fmt.Printf("%-44s %s\n", "driver boot ("+preset+" image):", ds.Boot)
	fmt.Printf("%-44s %s\n", "driver exec true (booted):", ds.Exec)
	fmt.Printf("%-44s %s\n", "driver stop:", ds.Stop)
	fmt.Printf("%-44s %s  (%.2fx floor)\n", "driver boot+exec+stop:", ds.Cycle, float64(ds.Cycle.Median)/float64(floor.Median))
	ds.Phases.Print(os.Stdout, "the driver boot ("+preset+" image) and its first exec")
}

// exitOn ends the command with status 1 on err, said on stderr after prefix (the section's
// name): a section that fails leaves the figures after it meaningless.
func exitOn(prefix string, err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, prefix, err)
		os.Exit(1)
	}
}

// guestSection measures guests of architecture name: the floor and cold sandbox::run over
// virtiofs and 9p. A guest of another architecture than the host's runs under tcg whatever
// accel says (as the adapter does).
func guestSection(ctx context.Context, name, fw, accel string, n int) error {
	a, err := guestarch.Parse(name)
	if err != nil {
		return err
	}
	if fw == "" {
		fw = filepath.Join("dist", "firmware", a.Triple)
		if _, err := os.Stat(filepath.Join(fw, firmware.ManifestFile)); err != nil {
			fw = firmware.DirFor(os.Getenv, a)
		}
	}
	if !a.Native() {
		accel = "tcg"
	}
	p := firmware.At(fw)
	cache := image.NewCacheFor(image.DirFor(image.DefaultDir(os.Getenv), a), a)
	fmt.Printf("%s guests: accelerator %s; firmware %s\n", a.Name, accel, fw)
	for _, share := range []string{qemu.ShareVirtiofs, qemu.Share9P} {
		d, err := qemu.New(qemu.Options{Arch: a, Share: share, Accel: accel, Kernel: p.Kernel, Initrd: p.Initrd,
			Qemu: os.Getenv("III_QEMU"), Virtiofsd: os.Getenv("III_VIRTIOFSD"), KVMDevice: os.Getenv("III_KVM_DEVICE")})
		if err != nil {
			fmt.Printf("%s guests: skipped: %v\n", a.Name, err)
			return nil
		}
		if share == qemu.ShareVirtiofs {
			floor, floorPhases, err := measureFloor(ctx, d, n)
			if err != nil {
				fmt.Printf("%s guests: skipped: the floor boot fails: %v\n", a.Name, err)
				return nil
			}
			fmt.Printf("%-44s %s\n", fmt.Sprintf("VM floor (%s, %d MiB, true):", d.Name(), sandboxMemoryMB), floor)
			floorPhases.Print(os.Stdout, "the floor")
			if _, ok := cache.RootFS(debimage.Presets[0].Ref); !ok {
				fmt.Printf("%s sandbox::run: skipped, image %s not in %s (go tool mage images)\n", a.Name, debimage.Presets[0].Ref, cache.Dir)
				return nil
			}
		}
		stats, phases, err := measureRuns(ctx, d, n, 0, cache, false)
		if err != nil {
			return err
		}
		for i, c := range runCases {
			fmt.Printf("%s %s\n", pad(fmt.Sprintf("run %s, cold, %s:", c.Label, d.Name()), 44), stats[i])
			phases[i].Print(os.Stdout, "the "+a.Name+" "+debimage.Presets[0].Name+" image")
		}
	}
	return nil
}

// otherArch is the guest architecture the adapter ships for besides this host's.
func otherArch() guestarch.Arch {
	if guestarch.Host().Name == guestarch.AArch64.Name {
		return guestarch.X86_64
	}
	return guestarch.AArch64
}

// defaultAccel is tcg where /dev/kvm is absent, auto elsewhere (as the demo and the suite pick).
func defaultAccel() string {
	if _, err := os.Stat(cmp.Or(os.Getenv("III_KVM_DEVICE"), qemu.DefaultKVMDevice)); err != nil {
		return "tcg"
	}
	return "auto"
}

// defaultFirmware is the firmware mage builds for this host (dist/firmware/<target>, from the
// repository root where mage runs the bench), else the installed one.
func defaultFirmware() string {
	dir := filepath.Join("dist", "firmware", platform.Host(os.Getenv).Triple)
	if _, err := os.Stat(filepath.Join(dir, firmware.ManifestFile)); err == nil {
		return dir
	}
	return firmware.Dir(os.Getenv)
}

// fsSection runs measureFS with at most 5 runs (each moves 64 MiB twice under emulation).
func fsSection(ctx context.Context, d *qemu.Driver, n int) {
	cache := image.NewCache("")
	root, ok := cache.RootFS(debimage.Presets[0].Ref)
	if !ok {
		fmt.Printf("fs::read / fs::write: skipped, image %s not cached (go tool mage images)\n", debimage.Presets[0].Ref)
		return
	}
	exitOn("bench: fs:", measureFS(ctx, d, min(n, 5), cache, root))
}

// runMode is one way sandbox::run is timed: cold (every run boots, or restores with snaps) or
// with a warm pool.
type runMode struct {
	label string
	pool  int
	snaps bool
}

var runModes = []runMode{{"cold, snapshots off", 0, false}, {"warm", 1, false}, {"cold, from a snapshot", 0, true}, {"warm, pool restored from a snapshot", 1, true}}

// warmSnapshotTargets are the targets for a warm pool that refills by restoring, by
// runCases index (0: none).
var warmSnapshotTargets = []time.Duration{0, 100 * time.Millisecond}

// runSection times sandbox::run of each case in each mode against the floor.
func runSection(ctx context.Context, d *qemu.Driver, n int, floor Stats, imageName string, modes []runMode) {
	fmt.Printf("sandbox::run end to end (client -> engine -> router -> adapter -> VM), image %s, default cpus/memory;\n", imageName)
	fmt.Printf("each run starts once the previous VM is gone (and the pool is full again); ratio = median / floor median;\n")
	var targets []string
	for _, c := range runCases {
		targets = append(targets, fmt.Sprintf("%s at most %.2fx the floor", c.Lang, c.Target))
	}
	fmt.Printf("targets: %s; from a snapshot: shell at most 0.25x, python at most 0.50x; a warm pool restored from a snapshot: python at most 100ms\n", strings.Join(targets, ", "))
	for _, mode := range modes {
		stats, phases, err := measureRuns(ctx, d, n, mode.pool, image.NewCache(""), mode.snaps)
		exitOn("bench: sandbox::run:", err)
		for i, c := range runCases {
			name := fmt.Sprintf("run %s, %s:", c.Label, mode.label)
			if mode.pool > 0 {
				name = fmt.Sprintf("run %s, warm_pool %d:", c.Label, mode.pool)
			}
			var v string
			switch {
			case mode.pool > 0 && mode.snaps:
				name = fmt.Sprintf("run %s, warm_pool %d restored:", c.Label, mode.pool)
				v = absVerdict(stats[i], warmSnapshotTargets[i])
			case mode.snaps:
				v = verdict(stats[i], floor, snapshotCases[i].Target)
			default:
				v = verdict(stats[i], floor, c.Target)
			}
			fmt.Printf("%s %s  %s\n", pad(name, 44), stats[i], v)
			phases[i].Print(os.Stdout, "the "+imageName+" image")
		}
	}
}
