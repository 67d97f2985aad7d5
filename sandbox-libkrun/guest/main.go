//go:build linux

// Command guest is the guest agent: /init of the sandbox initramfs. It loads the kernel modules
// listed in /lib/modules/order, mounts the pseudo filesystems, opens the virtio-serial port named
// "ctrl" and serves the frames of package proto: it assembles the root (read-only virtiofs lower
// layer, tmpfs upper layer or a VM worker's state disk, overlay, chroot) on Init, then runs
// commands and file operations.
//
// With iii.floor=1 on the kernel command line it powers off as soon as it starts (the boot floor
// measured by the bench).
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	initUptime = uptime()
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "guest: this program is the VM's /init and must run as PID 1")
		os.Exit(2)
	}
	if err := mountPseudo(); err != nil {
		fatal(err)
	}
	if cmdlineHas("iii.floor=1") {
		fmt.Fprintf(os.Stderr, "%s at %d ms\n", FloorMarker, initUptime.Milliseconds())
		powerOff()
	}
	t0 := time.Now()
	if err := loadModules("/lib/modules/order"); err != nil {
		fatal(err)
	}
	modulesTime = time.Since(t0)
	port, err := openPort("ctrl", 10*time.Second)
	if err != nil {
		fatal(err)
	}
	a := newAgent(port)
	if err := a.serve(); err != nil {
		fatal(err)
	}
	powerOff()
}

// FloorMarker is printed on the console by a floor boot, proving the kernel reached /init.
const FloorMarker = "iii-floor: init reached"

// modulesTime is how long loading the boot modules took, and initUptime the kernel's uptime when
// /init started; both are reported in Hello.
var modulesTime, initUptime time.Duration

// uptime is CLOCK_BOOTTIME: the time since the kernel started.
func uptime() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}

func cmdlineHas(word string) bool {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == word {
			return true
		}
	}
	return false
}

// fatal reports on the console (captured by the host into the boot error) and powers off.
func fatal(err error) {
	fmt.Fprintf(os.Stderr, "guest agent: fatal: %v\n", err)
	powerOff()
}

// powerOff syncs and restarts; the kernel's reboot=t and qemu's -no-reboot turn this into an exit.
func powerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	os.Exit(1)
}
