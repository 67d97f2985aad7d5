package qemu

import (
	"bytes"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// finishRAM makes a saved machine's RAM file sparse and durable: every page of zeros the guest
// left in it becomes a hole (it then costs neither disk nor, once restored, page cache), and the
// file is synced unless transient.
func finishRAM(path string, transient bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	const page = 4096
	buf := make([]byte, 1<<20)
	zero := make([]byte, page)
	var off, holeStart int64 = 0, -1
	punch := func(end int64) error {
		if holeStart < 0 {
			return nil
		}
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, holeStart, end-holeStart)
		holeStart = -1
		return err
	}
	for {
		n, err := io.ReadFull(f, buf)
		for p := 0; p+page <= n; p += page {
			if bytes.Equal(buf[p:p+page], zero) {
				if holeStart < 0 {
					holeStart = off + int64(p)
				}
			} else if err := punch(off + int64(p)); err != nil {
				return err
			}
		}
		off += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := punch(off); err != nil || transient {
		return err
	}
	return f.Sync()
}
