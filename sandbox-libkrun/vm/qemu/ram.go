package qemu

import (
	"os"
	"syscall"
)

// diskBytes is what the file at path holds on disk: its allocated blocks, so a sparse file's
// holes do not count.
func diskBytes(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512, nil
	}
	return st.Size(), nil
}
