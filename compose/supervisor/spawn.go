package supervisor

import (
	"os/exec"

	"github.com/iii-go/iii/internal/base/procgroup"
)

// Spawn starts cmd from the process-lifetime spawn thread (procgroup.OnSpawnThread), so that a
// parent-death signal set in cmd.SysProcAttr fires only when Compose itself dies, and records
// its pid.
func Spawn(cmd *exec.Cmd) error {
	var err error
	procgroup.OnSpawnThread(func() {
		err = startRecorded(cmd.Start, func() int { return cmd.Process.Pid })
	})
	return err
}
