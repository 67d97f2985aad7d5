//go:build unix

// Package dirlock takes exclusive advisory locks on directories, so that concurrent processes
// (two adapters installing firmware, two image builds sharing a download cache) take turns.
package dirlock

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Lock takes an exclusive flock on dir/name (created if missing) and returns the function that
// releases it; it waits while another process holds the lock.
func Lock(dir, name string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
