package demo

import "syscall"

// interruptWithParent has the kernel send the child SIGINT when the thread that started it
// exits (Linux's parent-death signal).
func interruptWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGINT}
}
