//go:build unix

package testscripts

import "syscall"

// asNobody runs a child as uid/gid 65534 (nobody).
func asNobody() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}
