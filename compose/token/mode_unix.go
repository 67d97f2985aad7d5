//go:build unix

package token

import (
	"io/fs"
	"syscall"
)

// noFollow makes opening a symlink fail instead of opening its target.
const noFollow = syscall.O_NOFOLLOW

// exposedMode reports whether group or others may read (or write) a file of this mode.
func exposedMode(m fs.FileMode) bool { return m.Perm()&0o077 != 0 }
