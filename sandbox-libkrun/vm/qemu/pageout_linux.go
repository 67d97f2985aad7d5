package qemu

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// releaseFileRAM tells the kernel that qemu p no longer needs the clean pages of its RAM file
// ram that it has mapped: a save reads every page of a restored machine's RAM, mapped private
// from the snapshot's file, and leaves the whole file (the holes of a sparse file included) in
// that qemu's memory, though its guest touched little of it. Those pages leave qemu's page
// tables and, mapped by no one else, are reclaimed; the guest faults back in what it reads
// later. Pages the guest wrote are anonymous copies and are left alone. Best effort: where the
// kernel lacks process_madvise or refuses it (it needs CAP_SYS_NICE), nothing changes.
func releaseFileRAM(p *proc, ram string) {
	if p == nil || ram == "" {
		return
	}
	pidfd, err := unix.PidfdOpen(p.pid(), 0)
	if err != nil {
		return
	}
	defer unix.Close(pidfd)
	// Once p is reaped its pid may name another process: a pidfd opened before p was reaped
	// names p. Were it another all the same, only its clean pages of ram would be paged out,
	// which it reads back as needed.
	if p.exited() {
		return
	}
	_, _ = pageOutFile(pidfd, p.pid(), ram)
}

// pageOutFile pages out, in the process pid (opened as pidfd), the present file pages of its
// mappings of the file path, and reports how many bytes the kernel took the advice for.
func pageOutFile(pidfd, pid int, path string) (int64, error) {
	maps, err := fileMappings(pid, path)
	if err != nil {
		return 0, err
	}
	var done int64
	for _, m := range maps {
		runs, err := filePageRuns(pid, m)
		if err != nil {
			return done, err
		}
		n, err := pageOut(pidfd, runs)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// span is a range of addresses [base, base+len) in another process.
type span struct{ base, len uintptr }

// fileMappings lists the ranges of pid's address space that map the file path, found in
// /proc/pid/maps by its device and inode or, failing those, by its path.
func fileMappings(pid int, path string) ([]span, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset major:minor inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		if !sameFile(fields, &st, abs) {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, span{uintptr(start), uintptr(end - start)})
	}
	return out, sc.Err()
}

// sameFile reports whether the fields of a /proc/pid/maps line name the file of st at path abs.
func sameFile(fields []string, st *unix.Stat_t, abs string) bool {
	if strings.Join(fields[5:], " ") == abs {
		return true
	}
	major, minor, ok := strings.Cut(fields[3], ":")
	if !ok {
		return false
	}
	maj, err1 := strconv.ParseUint(major, 16, 32)
	mnr, err2 := strconv.ParseUint(minor, 16, 32)
	ino, err3 := strconv.ParseUint(fields[4], 10, 64)
	return err1 == nil && err2 == nil && err3 == nil && ino != 0 && ino == st.Ino &&
		uint32(maj) == unix.Major(st.Dev) && uint32(mnr) == unix.Minor(st.Dev)
}

// Bits of a /proc/pid/pagemap entry.
const (
	pagePresent = 1 << 63
	pageFile    = 1 << 61 // a page of a file (or shared anonymous memory), not a private copy
)

// filePageRuns lists the runs of present file pages in pid's range m, read from its pagemap.
func filePageRuns(pid int, m span) ([]span, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	page := uintptr(os.Getpagesize())
	buf := make([]byte, 8*8192)
	var runs []span
	for addr := m.base; addr < m.base+m.len; {
		want := min(uintptr(len(buf)), (m.base+m.len-addr)/page*8)
		n, err := f.ReadAt(buf[:want], int64(addr/page*8))
		if n == 0 {
			return runs, err
		}
		for i := 0; i+8 <= n; i, addr = i+8, addr+page {
			e := binary.NativeEndian.Uint64(buf[i:])
			if e&pagePresent == 0 || e&pageFile == 0 {
				continue
			}
			if k := len(runs) - 1; k >= 0 && runs[k].base+runs[k].len == addr {
				runs[k].len += page
			} else {
				runs = append(runs, span{addr, page})
			}
		}
	}
	return runs, nil
}

// pageOut advises MADV_PAGEOUT over runs in the process pidfd, as many runs a call as the kernel
// takes (UIO_MAXIOV), and reports how many bytes it took the advice for.
func pageOut(pidfd int, runs []span) (int64, error) {
	const maxIOV = 1024
	var done int64
	for len(runs) > 0 {
		batch := runs[:min(len(runs), maxIOV)]
		runs = runs[len(batch):]
		// span has the layout of struct iovec: a base address and a length, each a word.
		n, _, errno := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(pidfd), uintptr(unsafe.Pointer(&batch[0])),
			uintptr(len(batch)), unix.MADV_PAGEOUT, 0, 0)
		if errno != 0 {
			return done, errno
		}
		done += int64(n)
	}
	return done, nil
}
