package qemu

import (
	"sync"

	"golang.org/x/sys/unix"
)

var thpOnce sync.Once

// noHugePages turns transparent huge pages off for this process, and so for every qemu it
// starts (the setting is inherited across fork and exec). qemu asks for huge pages on a guest's
// RAM; a restore from a snapshot writes each page the guest had in use, so with huge pages every
// 2 MiB around one such page became resident (a restored 512 MiB machine held 577 MiB). With
// 4 KiB pages a restored machine keeps only what its guest uses.
func noHugePages() {
	thpOnce.Do(func() { _ = unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0) })
}
