package supervisor

import (
	"fmt"
	"os"
	"sync"
	"syscall"
)

// EnvProcess marks every process the supervisor starts, and so every descendant that keeps its
// environment, with "<Compose pid>/<name>". A descendant that leaves its process group (setsid)
// escapes the group kills; the marker lets the supervisor, and the reaper after Compose is
// gone, find it anyway, so no worker's descendant outlives Compose.
const EnvProcess = "III_COMPOSE_PROCESS"

func marker(composePID int, name string) string { return fmt.Sprintf("%d/%s", composePID, name) }

// spawned holds the pids this process started itself (workers, hooks, the engine, the reaper),
// so that reaping the orphans it adopts as a subreaper never takes the exit status exec.Cmd.Wait
// waits for.
var spawned = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// startRecorded runs start (which starts cmd) and records the child's pid, under the lock the
// orphan reaper takes.
func startRecorded(start func() error, pid func() int) error {
	spawned.Lock()
	defer spawned.Unlock()
	if err := start(); err != nil {
		return err
	}
	spawned.pids[pid()] = true
	return nil
}

// signalPIDs sends sig to each pid.
func signalPIDs(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Signal(sig)
		}
	}
}
