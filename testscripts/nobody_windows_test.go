package testscripts

import "syscall"

// asNobody returns no attributes: Windows has no uid to drop to (os.Geteuid is -1 there, so
// no caller asks).
func asNobody() *syscall.SysProcAttr { return nil }
