//go:build !linux

package qemu

import (
	"os/exec"

	"github.com/iii-go/iii/internal/base/procgroup"
)

// startWithoutHugePages starts cmd as any other child: transparent huge pages, and the reason
// to keep them off a restore's RAM, are Linux's.
func startWithoutHugePages(cmd *exec.Cmd) error { return procgroup.Start(cmd) }
