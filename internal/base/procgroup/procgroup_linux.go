package procgroup

import "syscall"

// Attr puts the child in a new process group; with dieWithParent the kernel also sends it
// SIGKILL when the thread that started it exits.
func Attr(dieWithParent bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if dieWithParent {
		a.Pdeathsig = syscall.SIGKILL
	}
	return a
}

// Signal sends sig to every process of the group led by pid.
func Signal(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

// Alive reports whether a process with this pid exists (it may belong to another user).
func Alive(pid int) bool { return syscall.Kill(pid, 0) != syscall.ESRCH }
