package procgroup

import (
	"os"
	"syscall"
)

// Attr returns no special attributes: Windows has no process groups of this kind.
func Attr(dieWithParent bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// Signal ends the process pid; Windows cannot deliver other signals, so every signal kills.
func Signal(pid int, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// Alive reports whether a process with this pid exists.
func Alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	p.Release()
	return true
}
