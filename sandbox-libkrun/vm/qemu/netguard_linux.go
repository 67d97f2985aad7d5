package qemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompNotif and seccompResp mirror struct seccomp_notif and struct seccomp_notif_resp.
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// Offsets in struct seccomp_data that the filter loads.
const (
	offNr        = 0
	offArch      = 4
	offArg4Low   = 16 + 4*8 // sendto's dest_addr, low half (little-endian hosts)
	offArg4High  = offArg4Low + 4
	x32SyscallNr = 0x40000000 // x86_64's x32 ABI bit
)

// auditArch is the seccomp architecture of this process (and of the qemu it starts).
func auditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("no network guard for %s hosts", runtime.GOARCH)
}

// netFilter is the seccomp program of a networked machine's qemu: connect, sendmsg, sendmmsg and
// a sendto that names a destination go to the adapter (a user notification) to be checked; every
// other system call runs as usual, and one of another architecture or of the x32 ABI fails.
func netFilter(arch uint32) []unix.SockFilter {
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	// Jump offsets count from the next instruction: ALLOW is 12, NOTIFY 13, DENY 14.
	return []unix.SockFilter{
		/* 0 */ ld(offArch),
		/* 1 */ jeq(arch, 0, 12),
		/* 2 */ ld(offNr),
		/* 3 */ {Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: x32SyscallNr, Jt: 10},
		/* 4 */ jeq(uint32(unix.SYS_CONNECT), 8, 0),
		/* 5 */ jeq(uint32(unix.SYS_SENDMSG), 7, 0),
		/* 6 */ jeq(uint32(unix.SYS_SENDMMSG), 6, 0),
		/* 7 */ jeq(uint32(unix.SYS_SENDTO), 0, 4),
		/* 8 */ ld(offArg4Low),
		/* 9 */ jeq(0, 0, 3),
		/* 10 */ ld(offArg4High),
		/* 11 */ jeq(0, 0, 1),
		/* 12 */ ret(unix.SECCOMP_RET_ALLOW),
		/* 13 */ ret(unix.SECCOMP_RET_USER_NOTIF),
		/* 14 */ ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)),
	}
}

// startGuarded starts cmd with its network destinations checked against pol for its whole life.
//
// The seccomp filter is installed on an OS thread of its own (with no_new_privs, which a filter
// needs without privileges), cmd is forked from that thread and inherits the filter through
// exec, and the thread stays parked until exited is closed: cmd's parent-death signal comes when
// the thread that forked it ends, so it must outlive cmd. The thread is never returned to the
// runtime. The filter's listener is this process's (close-on-exec, so cmd never holds it); if
// the adapter stops answering, the checked calls fail rather than pass.
func startGuarded(cmd *exec.Cmd, pol *netPolicy, exited <-chan struct{}) error {
	arch, err := auditArch()
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread carries the filter and ends with this goroutine
		listener, err := installFilter(netFilter(arch))
		if err != nil {
			errc <- err
			return
		}
		if err := cmd.Start(); err != nil {
			unix.Close(listener)
			errc <- err
			return
		}
		// Opening the memory file is where the kernel checks that the adapter may read it
		// (ptrace access: Yama's ptrace_scope 2 or 3 refuses it even to the parent). Without it
		// every checked call would be refused, the agent's port included: fail the start now.
		mem, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/mem")
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			unix.Close(listener)
			errc <- fmt.Errorf("network guard: cannot read the memory of qemu (pid %d), so cannot check its destinations: %w", cmd.Process.Pid, err)
			return
		}
		go superviseNet(listener, map[uint32]*os.File{uint32(cmd.Process.Pid): mem}, pol, exited)
		errc <- nil
		<-exited
	}()
	return <-errc
}

// installFilter puts prog on the calling thread and returns its notification listener.
func installFilter(prog []unix.SockFilter) (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("network guard: no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, fmt.Errorf("network guard: seccomp filter with a listener: %w", errno)
	}
	return int(fd), nil
}

// superviseNet answers the checked calls of the processes under listener until none is left
// (the listener then reports a hang-up) or exited is closed. mems caches /proc/<tid>/mem files.
func superviseNet(listener int, mems map[uint32]*os.File, pol *netPolicy, exited <-chan struct{}) {
	defer unix.Close(listener)
	defer func() {
		for _, f := range mems {
			f.Close()
		}
	}()
	for {
		fds := []unix.PollFd{{Fd: int32(listener), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 500)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if n == 0 || err != nil {
			select {
			case <-exited:
				return
			default:
				continue
			}
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			return // hang-up: no process uses the filter any more
		}
		var req seccompNotif
		if err := ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
				continue // interrupted, or the caller went away before it was read
			}
			return
		}
		resp := seccompResp{ID: req.ID}
		ok := checkCall(mems, &req, pol)
		// The memory read may have raced the caller's death and the reuse of its id.
		if ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&req.ID)) != nil {
			continue
		}
		switch {
		case ok:
			resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
		case req.Nr == int32(unix.SYS_CONNECT):
			resp.Error = -int32(unix.ECONNREFUSED) // slirp answers the guest's SYN with a reset
		default:
			resp.Error = -int32(unix.EACCES)
		}
		_ = ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	}
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// maxSockaddr bounds the socket address read from the caller (struct sockaddr_storage).
const maxSockaddr = 128

// checkCall reports whether the checked call req may run: every destination it names must be
// permitted by pol. The caller's memory is read through /proc/<tid>/mem (the adapter is qemu's
// parent, so ptrace access is granted); what cannot be read is refused.
func checkCall(mems map[uint32]*os.File, req *seccompNotif, pol *netPolicy) bool {
	open := func() *os.File {
		f, err := os.Open("/proc/" + strconv.FormatUint(uint64(req.PID), 10) + "/mem")
		if err != nil {
			return nil
		}
		mems[req.PID] = f
		return f
	}
	read := func(addr, n uint64) []byte {
		b := make([]byte, n)
		// A cached file whose thread has gone (its id now another's) fails once: reopen.
		for try := 0; try < 2; try++ {
			mem := mems[req.PID]
			if mem == nil || try > 0 {
				if mem != nil {
					mem.Close()
					delete(mems, req.PID)
				}
				if mem = open(); mem == nil {
					return nil
				}
			}
			if _, err := mem.ReadAt(b, int64(addr)); err == nil {
				return b
			}
		}
		return nil
	}
	// payload reads at most maxDNSQuery bytes of a datagram from the iovecs at iov (the DNS
	// check of a policy; read only when asked).
	gather := func(iov, iovlen uint64) []byte {
		var out []byte
		for i := uint64(0); i < iovlen && i < 1024 && len(out) < maxDNSQuery; i++ {
			v := read(iov+16*i, 16)
			if v == nil {
				return nil
			}
			base, n := binary.NativeEndian.Uint64(v), binary.NativeEndian.Uint64(v[8:])
			n = min(n, uint64(maxDNSQuery-len(out)))
			if n == 0 {
				continue
			}
			b := read(base, n)
			if b == nil {
				return nil
			}
			out = append(out, b...)
		}
		return out
	}
	addr := func(ptr, n uint64, stream bool, payload func() []byte) bool {
		if n > maxSockaddr {
			n = maxSockaddr
		}
		sa := read(ptr, n)
		return sa != nil && pol.permitsCall(sa, stream, payload)
	}
	a := req.Args
	switch req.Nr {
	case int32(unix.SYS_CONNECT):
		return addr(a[1], a[2], true, nil)
	case int32(unix.SYS_SENDTO):
		return a[4] == 0 || addr(a[4], a[5], false, func() []byte { return read(a[1], min(a[2], maxDNSQuery)) })
	case int32(unix.SYS_SENDMSG):
		return msgNamesOK(read, a[1], 1, 0, addr, gather)
	case int32(unix.SYS_SENDMMSG):
		n := a[2]
		if n > 1024 { // UIO_MAXIOV: the kernel sends no more
			n = 1024
		}
		return msgNamesOK(read, a[1], n, 64, addr, gather)
	}
	return false
}

// msgNamesOK checks msg_name of n struct msghdr at ptr, stride bytes apart (struct mmsghdr is 64
// bytes on 64-bit hosts; msg_name is its first field, msg_namelen at offset 8, msg_iov at 16
// and msg_iovlen at 24), each with its datagram (gather reads it from the iovecs).
func msgNamesOK(read func(addr, n uint64) []byte, ptr, n, stride uint64, addr func(ptr, n uint64, stream bool, payload func() []byte) bool, gather func(iov, iovlen uint64) []byte) bool {
	for i := uint64(0); i < n; i++ {
		h := read(ptr+i*stride, 32)
		if h == nil {
			return false
		}
		name, namelen := binary.NativeEndian.Uint64(h), uint64(binary.NativeEndian.Uint32(h[8:]))
		iov, iovlen := binary.NativeEndian.Uint64(h[16:]), binary.NativeEndian.Uint64(h[24:])
		if name != 0 && !addr(name, namelen, false, func() []byte { return gather(iov, iovlen) }) {
			return false
		}
	}
	return true
}
