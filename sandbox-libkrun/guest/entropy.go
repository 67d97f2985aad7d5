//go:build linux

package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seedEntropy credits seed (random bytes from the host) to the kernel's pool. The emulated CPU
// has no RDRAND and the VM no hardware RNG, so without this the kernel's generator stays
// uninitialised for seconds and getrandom() — which Python calls at every start — blocks.
func seedEntropy(seed []byte) error {
	if len(seed) == 0 {
		return nil
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(buf[0:], uint32(len(seed)*8))
	binary.NativeEndian.PutUint32(buf[4:], uint32(len(seed)))
	copy(buf[8:], seed)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", errno)
	}
	return nil
}

// reseedEntropy credits seed to the kernel's pool and makes the kernel reseed its generator
// from the pool at once (RNDRESEEDCRNG), so a restored copy of a snapshot stops producing the
// stream every other copy of it produces.
func reseedEntropy(seed []byte) error {
	if len(seed) < 32 {
		return fmt.Errorf("%d bytes of seed, at least 32 needed", len(seed))
	}
	if err := seedEntropy(seed); err != nil {
		return err
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); errno != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", errno)
	}
	return nil
}
