package qemu

import (
	"os/exec"

	"golang.org/x/sys/unix"

	"github.com/iii-go/iii/internal/base/procgroup"
)

// startWithoutHugePages starts cmd with transparent huge pages off for its whole life: the
// kernel keeps the flag in the memory descriptor and hands it on through fork and exec
// (PR_SET_THP_DISABLE), so it is set on this process just for the moment of the start, on the
// spawn thread every child of the driver is started from.
//
// A restore needs it: qemu asks for huge pages on a machine's RAM (MADV_HUGEPAGE) and, loading a
// snapshot, reads every page the stream marks as zero to see whether it must clear it. On a
// host whose kernel maps no huge zero page (transparent_hugepage/use_zero_page 0) each such read
// makes a whole 2 MiB page resident, and the restored machine holds its entire RAM (599 MiB for
// a 512 MiB machine whose snapshot carries 79 MiB). With 4 KiB pages a read of an untouched page
// maps the kernel's shared zero page, and the machine holds only what its guest wrote (154 MiB).
func startWithoutHugePages(cmd *exec.Cmd) error {
	var err error
	procgroup.OnSpawnThread(func() {
		if e := unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0); e != nil {
			err = e
			return
		}
		err = cmd.Start()
		_ = unix.Prctl(unix.PR_SET_THP_DISABLE, 0, 0, 0, 0)
	})
	return err
}
