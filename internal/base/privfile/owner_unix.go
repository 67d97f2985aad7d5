//go:build unix

package privfile

import (
	"io/fs"
	"os"
	"syscall"
)

func ownedByUser(st fs.FileInfo) bool {
	s, ok := st.Sys().(*syscall.Stat_t)
	return !ok || int(s.Uid) == os.Getuid()
}

func exposed(m fs.FileMode) bool { return m.Perm()&0o077 != 0 }
