//go:build !linux

package demo

import "syscall"

// interruptWithParent returns no attributes: only Linux has a parent-death signal.
func interruptWithParent() *syscall.SysProcAttr { return nil }
