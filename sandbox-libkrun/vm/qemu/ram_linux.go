package qemu

import (
	"bytes"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// finishRAM makes a saved machine's RAM file sparse and durable: every page of zeros the guest
// left in it becomes a hole (it then costs neither disk nor, once restored, page cache), and the
// file is synced unless transient. Only the file's data is read: the holes qemu left (pages it
// never wrote) are skipped.
func finishRAM(path string, transient bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // nothing but a hole to the end
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if err := punchZeros(f, data, hole); err != nil {
			return err
		}
		off = hole
	}
	if transient {
		return nil
	}
	return f.Sync()
}

// punchZeros turns every page of zeros in f's bytes [from, to) into a hole.
func punchZeros(f *os.File, from, to int64) error {
	const page = 4096
	buf := make([]byte, 1<<20)
	zero := make([]byte, page)
	holeStart := int64(-1)
	punch := func(end int64) error {
		if holeStart < 0 {
			return nil
		}
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, holeStart, end-holeStart)
		holeStart = -1
		return err
	}
	for off := from; off < to; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), to-off)], off)
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
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	return punch(to)
}

// growPipe widens the pipe whose write end is w to 1 MiB (the unprivileged most, by default), so
// a saving qemu writes its stream in fewer, larger pieces than the 64 KiB default lets it; where
// the kernel refuses, the pipe keeps its size.
func growPipe(w *os.File) {
	_, _ = unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 1<<20)
}
