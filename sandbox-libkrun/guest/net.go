//go:build linux

package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The user-mode network qemu provides (slirp): the guest address, its gateway and the DNS
// forwarder. The gateway routes to the outside; the host's loopback services behind it are
// refused by the host (vm/qemu's network guard), except the engine's port for a VM worker.
var (
	guestIP   = net.IPv4(10, 0, 2, 15).To4()
	gatewayIP = net.IPv4(10, 0, 2, 2).To4()
	netmask   = net.IPv4(255, 255, 255, 0).To4()
)

const dnsServer = "10.0.2.3"

// rtentry mirrors struct rtentry of <net/route.h> on 64-bit Linux, for SIOCADDRT.
type rtentry struct {
	pad1    uint64
	dst     unix.RawSockaddrInet4
	gateway unix.RawSockaddrInet4
	genmask unix.RawSockaddrInet4
	flags   uint16
	pad2    int16
	pad3    uint64
	pad4    uintptr
	metric  int16
	dev     uintptr
	mtu     uint64
	window  uint64
	irtt    uint16
}

func setUp(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s up: %w", name, err)
	}
	return nil
}

// setupLoopback brings lo up so programs can listen on localhost without a network.
func setupLoopback() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return setUp(fd, "lo")
}

// loadNetModules loads the network driver; call before leaving the initramfs root.
func loadNetModules() error { return loadModules("/lib/modules/order.net") }

// setupNetwork configures the first non-loopback interface for qemu's user-mode network and
// writes /etc/resolv.conf (call after the switch to the sandbox root).
func setupNetwork() error {
	ifaces, _ := filepath.Glob("/sys/class/net/*")
	name := ""
	for _, p := range ifaces {
		if b := filepath.Base(p); b != "lo" {
			name = b
			break
		}
	}
	if name == "" {
		return fmt.Errorf("no network interface (virtio_net not loaded?)")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, a := range []struct {
		req uint
		ip  net.IP
	}{{unix.SIOCSIFADDR, guestIP}, {unix.SIOCSIFNETMASK, netmask}} {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(a.ip); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, a.req, ifr); err != nil {
			return fmt.Errorf("%s address: %w", name, err)
		}
	}
	if err := setUp(fd, name); err != nil {
		return err
	}
	rt := rtentry{flags: unix.RTF_UP | unix.RTF_GATEWAY}
	rt.dst.Family = unix.AF_INET
	rt.genmask.Family = unix.AF_INET
	rt.gateway.Family = unix.AF_INET
	copy(rt.gateway.Addr[:], gatewayIP)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCADDRT, uintptr(unsafe.Pointer(&rt))); errno != 0 {
		return fmt.Errorf("default route: %w", errno)
	}
	_ = os.MkdirAll("/etc", 0o755)
	return os.WriteFile("/etc/resolv.conf", []byte("nameserver "+dnsServer+"\n"), 0o644)
}
