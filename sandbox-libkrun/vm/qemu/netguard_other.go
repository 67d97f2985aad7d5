//go:build !linux

package qemu

import (
	"fmt"
	"os/exec"
	"runtime"
)

// startGuarded starts cmd for a networked machine. Only Linux can check qemu's destinations
// (seccomp): elsewhere a machine that must be kept off the host's loopback (a sandbox, whose
// policy grants no host access) is refused, and one granted host access (a VM worker, which
// presents the project token to the engine) starts unchecked and reaches every loopback service.
func startGuarded(cmd *exec.Cmd, pol *netPolicy, exited <-chan struct{}) error {
	if len(pol.grants) == 0 || len(pol.egress) > 0 {
		return fmt.Errorf("a guest with networking would reach this host's loopback services: on %s the driver cannot keep it off them, so only VM workers get networking here", runtime.GOOS)
	}
	return startCmd(cmd)
}
