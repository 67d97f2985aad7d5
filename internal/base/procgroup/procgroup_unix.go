//go:build unix && !linux

package procgroup

import "syscall"

// Attr puts the child in a new process group. dieWithParent has no kernel support outside
// Linux; callers there rely on their reaper process.
func Attr(dieWithParent bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// Signal sends sig to every process of the group led by pid.
func Signal(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

// Alive reports whether a process with this pid exists (it may belong to another user).
func Alive(pid int) bool { return syscall.Kill(pid, 0) != syscall.ESRCH }
